"""`postbox tail TOPIC`: decoded records from a start position, filtered, bounded or followed."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Optional

import typer

from postbox.cli.client_options import kafka_client_options
from postbox.cli.incident_common import KafkaOpt, event_id as parse_event_id, kafka_for, progress, settings_for
from postbox.cli.output import JsonAliasOpt, OutputFormat, err_console, output_format, print_json
from postbox.cli.record_output import print_record
from postbox.incident.records import jsonable, printable

if TYPE_CHECKING:
    from postbox.incident.tail import End, Start, TailResult


def register(app: typer.Typer) -> None:
    app.command("tail", help="Decoded records of a topic: start anywhere, filter, --follow.")(tail)


@kafka_client_options
def tail(
    topic: str = typer.Argument(..., help="Topic to read, e.g. outbox.event.order or outbox.event.order.dlq."),
    start: Optional[str] = typer.Option(None, "--from", help="beginning | end | last:N (the last N of EACH partition) | OFFSET | ISO time | duration ago (15m, 2h). Default: beginning, or end with --follow."),
    until: Optional[str] = typer.Option(None, "--until", help="Stop before this OFFSET (every partition), ISO time or duration ago (like kcat -o e@ts); with --follow, stop there."),
    partition: Optional[list[int]] = typer.Option(None, "--partition", "-p", metavar="PARTITION", help="Only this partition (repeatable: -p 0 -p 3)."),
    key: Optional[str] = typer.Option(None, "--key", help="Only records with this key (aggregate id)."),
    event_type: Optional[str] = typer.Option(None, "--event-type", help="Only this event type (header)."),
    event_id: Optional[str] = typer.Option(None, "--event-id", help="Only this event id (header)."),
    where: Optional[list[str]] = typer.Option(None, "--where", metavar="FIELD=VALUE", help="Payload field filter (dotted path; repeatable)."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep reading new records until --limit or Ctrl-C."),
    limit: Optional[int] = typer.Option(None, "--limit", "-n", min=1, help="Show at most this many matching records (default 50; unlimited with --follow)."),
    max_scan: int = typer.Option(1_000_000, "--max-scan", min=1, help="Examine at most this many records (bounded scan)."),
    idle_timeout: Optional[float] = typer.Option(None, "--idle-timeout", help="With --follow: stop after this many seconds without records."),
    output: Optional[OutputFormat] = typer.Option(
        None, "--output", "-o", case_sensitive=False,
        help="table (the record form, also when piped: nothing cut) | json (with --follow one object per line) | tsv (one line per record)."),
    json_output: bool = JsonAliasOpt,
    kafka_bootstrap: Optional[str] = KafkaOpt,
) -> int:
    from postbox.incident import tail as tailmod

    fmt = output_format(output or OutputFormat.table, json_output)
    start_at, end_at, fields = _positions(start, until, where, follow)
    filters = tailmod.Filters(key=key, event_type=event_type, fields=fields,
                              event_id=parse_event_id(event_id, "--event-id") if event_id else None)
    settings = settings_for(kafka_bootstrap=kafka_bootstrap)
    with kafka_for(settings) as kafka:
        parts = _partitions(kafka.partitions(topic), topic, partition)
        if follow:
            _follow(tailmod.follow(kafka, topic, parts, start_at, filters, limit=limit, idle_timeout=idle_timeout, end=end_at if until else None),
                    f"following {topic} from {start_at.describe()} (Ctrl-C to stop)…", fmt)
            return 0
        result = tailmod.read(kafka, topic, parts, start_at, filters, limit=limit or 50, max_scan=max_scan,
                              progress=progress(f"reading {topic}"), end=end_at)
    _print_result(result, topic, parts, start_at, end_at, fmt)
    return 0


def _positions(start: str | None, until: str | None, where: list[str] | None, follow: bool) -> tuple[Start, End, list[tuple[str, str]]]:
    """``--from``, ``--until`` and ``--where`` read (``--from`` defaults to the end when following);
    a value that cannot be read is the user's bad parameter."""
    from postbox.incident import tail as tailmod

    try:
        return (tailmod.parse_start(start or ("end" if follow else "beginning")), tailmod.parse_end(until),
                tailmod.parse_where(list(where or [])))
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def _partitions(available: list[int], topic: str, partition: list[int] | None) -> list[int]:
    """The ``--partition`` values (sorted, once each) or every partition; one the topic lacks is refused."""
    parts = sorted(set(partition)) if partition else available
    missing = [p for p in parts if p not in available]
    if missing:
        raise typer.BadParameter(f"topic {topic} has partitions {available}, not {missing}", param_hint="--partition")
    return parts


def _print_result(result: TailResult, topic: str, parts: list[int], start_at: Start, end_at: End, fmt: OutputFormat) -> None:
    """A bounded read's records: one JSON document, or TSV / record form lines with a summary on stderr."""
    if fmt is OutputFormat.json:
        print_json({
            "topic": topic, "from": start_at.describe(), "until": end_at.describe(),
            "partitions": {str(p): {"start": result.starts[p], "end": result.ends[p]} for p in parts},
            "scanned": result.scanned, "complete": result.complete, "matched": len(result.records),
            "records": [v.as_dict() for v in result.records],
        })
        return
    if fmt is OutputFormat.tsv:
        sys.stdout.write("\t".join(TSV_COLUMNS) + "\n")
    for view in result.records:
        _print_one(view, fmt)
    cut = "" if result.complete else f" (stopped after {result.scanned:,} records: --max-scan)"
    err_console.print(f"[dim]{len(result.records)} record(s) shown, {result.scanned:,} scanned from {start_at.describe()}"
                      f" until {end_at.describe()}{cut}[/]", highlight=False)


#: The columns of `tail --output tsv`: one line per record, values terminal-safe, payload as JSON.
TSV_COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "event_type", "event_id", "encoding", "value")


def _print_one(view: Any, fmt: OutputFormat) -> None:
    if fmt is OutputFormat.json:
        sys.stdout.write(json.dumps(view.as_dict(), sort_keys=True, default=str) + "\n")
        sys.stdout.flush()
    elif fmt is OutputFormat.tsv:
        value = view.value_hex if view.payload is None else json.dumps(jsonable(view.payload), ensure_ascii=False, sort_keys=True)
        cells = (view.topic, view.partition, view.offset, view.timestamp, view.key_text, view.meta.event_type, view.meta.event_id, view.encoding, value)
        sys.stdout.write("\t".join(printable("" if c is None else str(c)) for c in cells) + "\n")
        sys.stdout.flush()
    else:
        print_record(view)


def _follow(views: Iterable[Any], banner: str, fmt: OutputFormat) -> None:
    """Print records as they arrive: JSON lines, TSV lines, or the record form under a banner on stderr."""
    if fmt is not OutputFormat.json:
        err_console.print(f"[dim]{banner}[/]")
    if fmt is OutputFormat.tsv:
        sys.stdout.write("\t".join(TSV_COLUMNS) + "\n")
    try:
        for view in views:
            _print_one(view, fmt)
    except KeyboardInterrupt:
        pass
