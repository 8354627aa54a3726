"""`postbox tail TOPIC`: decoded records from a start position, filtered, bounded or followed."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import Any, Optional

import typer

from postbox.cli.client_options import kafka_client_options
from postbox.cli.incident_common import KafkaOpt, event_id as parse_event_id, kafka_for, progress, settings_for
from postbox.cli.output import err_console, print_json
from postbox.cli.record_output import print_record


def register(app: typer.Typer) -> None:
    app.command("tail", help="Decoded records of a topic: start anywhere, filter, --follow.")(tail)


@kafka_client_options
def tail(
    topic: str = typer.Argument(..., help="Topic to read, e.g. outbox.event.order or outbox.event.order.dlq."),
    start: Optional[str] = typer.Option(None, "--from", help="beginning | end | last:N | OFFSET | ISO time | duration ago (15m, 2h). Default: beginning, or end with --follow."),
    partition: Optional[list[int]] = typer.Option(None, "--partition", "-p", help="Only these partitions (repeatable)."),
    key: Optional[str] = typer.Option(None, "--key", help="Only records with this key (aggregate id)."),
    event_type: Optional[str] = typer.Option(None, "--event-type", help="Only this event type (header)."),
    event_id: Optional[str] = typer.Option(None, "--event-id", help="Only this event id (header)."),
    where: Optional[list[str]] = typer.Option(None, "--where", help="Payload field filter FIELD=VALUE (dotted path; repeatable)."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep reading new records until --limit or Ctrl-C."),
    limit: Optional[int] = typer.Option(None, "--limit", "-n", min=1, help="Show at most this many matching records (default 50; unlimited with --follow)."),
    max_scan: int = typer.Option(1_000_000, "--max-scan", min=1, help="Examine at most this many records (bounded scan)."),
    idle_timeout: Optional[float] = typer.Option(None, "--idle-timeout", help="With --follow: stop after this many seconds without records."),
    json_output: bool = typer.Option(False, "--json", help="One JSON document; with --follow one JSON object per line."),
    kafka_bootstrap: Optional[str] = KafkaOpt,
) -> int:
    from postbox.incident import tail as tailmod

    try:
        start_at = tailmod.parse_start(start or ("end" if follow else "beginning"))
        fields = tailmod.parse_where(list(where or []))
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    filters = tailmod.Filters(key=key, event_type=event_type, fields=fields,
                              event_id=parse_event_id(event_id, "--event-id") if event_id else None)
    settings = settings_for(kafka_bootstrap=kafka_bootstrap)
    with kafka_for(settings) as kafka:
        available = kafka.partitions(topic)
        parts = sorted(set(partition)) if partition else available
        missing = [p for p in parts if p not in available]
        if missing:
            raise typer.BadParameter(f"topic {topic} has partitions {available}, not {missing}", param_hint="--partition")
        if follow:
            _follow(tailmod.follow(kafka, topic, parts, start_at, filters, limit=limit, idle_timeout=idle_timeout),
                    f"following {topic} from {start_at.describe()} (Ctrl-C to stop)…", json_output)
            return 0
        result = tailmod.read(kafka, topic, parts, start_at, filters, limit=limit or 50, max_scan=max_scan,
                              progress=progress(f"reading {topic}"))
    if json_output:
        print_json({
            "topic": topic, "from": start_at.describe(),
            "partitions": {str(p): {"start": result.starts[p], "end": result.ends[p]} for p in parts},
            "scanned": result.scanned, "complete": result.complete, "matched": len(result.records),
            "records": [v.as_dict() for v in result.records],
        })
        return 0
    for view in result.records:
        print_record(view)
    note = "" if result.complete else f" (stopped after {result.scanned:,} records: --max-scan)"
    err_console.print(f"[dim]{len(result.records)} record(s) shown, {result.scanned:,} scanned from {start_at.describe()}{note}[/]", highlight=False)
    return 0


def _follow(views: Iterable[Any], banner: str, json_output: bool) -> None:
    """Print records as they arrive: JSON lines, or the people's form under a banner on stderr."""
    if not json_output:
        err_console.print(f"[dim]{banner}[/]")
    try:
        for view in views:
            if json_output:
                sys.stdout.write(json.dumps(view.as_dict(), sort_keys=True, default=str) + "\n")
                sys.stdout.flush()
            else:
                print_record(view)
    except KeyboardInterrupt:
        pass
