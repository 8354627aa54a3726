"""`postbox dlq list|show|replay`: dead letters, and replaying them to their origin (dry run by default)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from postbox.cli.client_options import kafka_client_options
from postbox.cli.incident_common import (
    JsonOpt,
    KafkaOpt,
    TtlOpt,
    YesOpt,
    confirm,
    duration,
    event_id as parse_event_id,
    kafka_for,
    marker_ttl as resolve_ttl,
    progress,
    settings_for,
    shorten,
    write_audit,
)
from postbox.cli.output import console, err_console, print_json
from postbox.cli.record_output import print_record
from postbox.errors import PostboxError

dlq_app = typer.Typer(help="Dead letters: list, show, replay to the origin topic (dry run by default).", no_args_is_help=True)

TopicOpt = typer.Option(None, "--topic", help="An origin topic or its .dlq (default: every *.dlq).")


def register(app: typer.Typer) -> None:
    app.add_typer(dlq_app, name="dlq")


@dlq_app.command("list")
@kafka_client_options
def dlq_list(
    topic: Optional[str] = TopicOpt,
    event_id: Optional[list[str]] = typer.Option(None, "--event-id", help="Only these events (repeatable)."),
    error_class: Optional[str] = typer.Option(None, "--error-class", help="Only this error class (DecodeError, EffectFailed, EffectFailed:WRONGTYPE, ...)."),
    group: Optional[str] = typer.Option(None, "--group", help="Only dead letters of this consumer group."),
    since: Optional[str] = typer.Option(None, "--since", help="Only dead letters from this long ago (e.g. 2h)."),
    limit: int = typer.Option(100, "--limit", "-n", min=1, help="Show at most this many (the newest)."),
    max_scan: int = typer.Option(200_000, "--max-scan", min=1, help="Examine at most this many records."),
    json_output: bool = JsonOpt,
    kafka_bootstrap: Optional[str] = KafkaOpt,
) -> int:
    from postbox.incident.dlq import Selection, dlq_topics, read_dead_letters

    ids = [parse_event_id(e, "--event-id") for e in (event_id or [])]
    window = duration(since, "--since")
    settings = settings_for(kafka_bootstrap=kafka_bootstrap)
    with kafka_for(settings) as kafka:
        names = dlq_topics(kafka, topic)
        letters, scanned, complete = read_dead_letters(
            kafka, names, Selection(ids, error_class, group),
            since=datetime.now(timezone.utc) - window if window else None, max_scan=max_scan, progress=progress("reading dead letters"),
        )
    shown = letters[-limit:]
    if json_output:
        print_json({"topics": names, "scanned": scanned, "complete": complete, "total": len(letters),
                    "dead_letters": [d.as_dict() for d in shown]})
        return 0
    table = Table(title=f"dead letters ({len(letters)} in {', '.join(names) or 'no DLQ topic'})")
    for col in ("ref", "dead-lettered", "event id", "type", "key", "group", "class", "error"):
        table.add_column(col)
    for d in shown:
        table.add_row(d.ref, d.record.timestamp or "", d.event_id or "", d.record.meta.event_type or "", str(d.record.key),
                      d.group or "", d.error_class or "", escape(shorten(d.error or "", 70)))
    console.print(table)
    if not complete:
        err_console.print(f"[yellow]stopped after {scanned:,} records (--max-scan)[/]")
    return 0


@dlq_app.command("show")
@kafka_client_options
def dlq_show(
    which: str = typer.Argument(..., help="An event id, or a dead letter's ref TOPIC:PARTITION:OFFSET (from `dlq list`)."),
    topic: Optional[str] = typer.Option(None, "--topic", help="Origin topic or its .dlq to search (default: every *.dlq)."),
    json_output: bool = JsonOpt,
    kafka_bootstrap: Optional[str] = KafkaOpt,
) -> int:
    from postbox.incident.dlq import Selection, dlq_topics, find_by_ref, is_ref, read_dead_letters

    ref = is_ref(which)
    eid = None if ref else parse_event_id(which, "WHICH")
    settings = settings_for(kafka_bootstrap=kafka_bootstrap)
    with kafka_for(settings) as kafka:
        if ref:
            letters = [find_by_ref(kafka, which)]
        else:
            letters, _, _ = read_dead_letters(kafka, dlq_topics(kafka, topic), Selection([eid]), progress=progress("searching dead letters"))
    if not letters:
        raise PostboxError(f"no dead letter for event {eid}", fix=f"`postbox trace {eid}` shows where the event is")
    if json_output:
        print_json({"dead_letters": [d.as_dict(full=True) for d in letters]})
        return 0
    for d in letters:
        _print_letter(d)
    return 0


def _print_letter(d: Any) -> None:
    console.print(f"[bold]{d.ref}[/]  dead-lettered {d.record.timestamp} by group [bold]{d.group}[/] after {d.attempts} attempt(s)", highlight=False)
    console.print(f"  [red]{escape(str(d.error_class))}[/]: {escape(str(d.error))}", highlight=False)
    console.print(f"  origin {d.origin_topic}[{d.origin_partition}]@{d.origin_offset}, created {d.as_dict()['created_at']}", highlight=False)
    if d.reference_only:
        console.print(f"  [yellow]reference-only[/]: the original record ({d.original_bytes or '?'} bytes) was too large for"
                      f" {d.record.topic} and stays at its origin offset; `postbox dlq replay` reads it from there", highlight=False)
    print_record(d.record)


@dlq_app.command("replay")
@kafka_client_options
def dlq_replay(
    topic: Optional[str] = TopicOpt,
    event_id: Optional[list[str]] = typer.Option(None, "--event-id", help="Replay these events (repeatable)."),
    error_class: Optional[str] = typer.Option(None, "--error-class", help="Replay every dead letter of this error class."),
    group: Optional[str] = typer.Option(None, "--group", help="Only dead letters of this group."),
    all_letters: bool = typer.Option(False, "--all", help="Replay every dead letter (of --topic, if given)."),
    execute: bool = typer.Option(False, "--execute", help="Send the records (default: dry run, show what would be sent)."),
    force: bool = typer.Option(False, "--force", help="Also replay events whose dedupe markers may have expired."),
    marker_ttl: Optional[str] = TtlOpt,
    margin: str = typer.Option("1h", "--safety-margin", help="Treat markers as expired this long before the TTL ends."),
    yes: bool = YesOpt,
    json_output: bool = JsonOpt,
    kafka_bootstrap: Optional[str] = KafkaOpt,
) -> int:
    from postbox.incident.dlq import Selection, dlq_topics, execute_replay, prepare_replay, replay_audit

    ids = [parse_event_id(e, "--event-id") for e in (event_id or [])]
    if not (ids or error_class or all_letters):
        raise typer.BadParameter("choose what to replay: --event-id, --error-class or --all", param_hint="selection")
    chosen = {"event_ids": ids, "error_class": error_class, "group": group, "all": all_letters, "topic": topic}
    ttl = resolve_ttl(marker_ttl)
    safety = duration(margin, "--safety-margin") or timedelta(0)
    settings = settings_for(kafka_bootstrap=kafka_bootstrap)
    with kafka_for(settings) as kafka:
        report = prepare_replay(kafka, dlq_topics(kafka, topic), Selection(ids, error_class, group), marker_ttl=ttl,
                                margin=safety, force=force, progress=progress("reading dead letters"))
        ready = report.having("ready")
        if execute and ready:
            confirm(f"send {len(ready)} dead letter(s) back to {report.destinations}?", yes)
            execute_replay(kafka, report)
            report.audit = write_audit(kafka, replay_audit(report, chosen, force))
    if json_output:
        report.executed = execute
        print_json(report.as_dict())
    else:
        _print_replay(report, execute)
    return 1 if report.problem else 0


_STATUS_COLORS = {"ready": "cyan", "sent": "green", "unsafe": "red", "failed": "red", "duplicate": "dim", "no-origin": "red"}


def _print_replay(report: Any, execute: bool) -> None:
    from postbox.incident.redis_state import human_duration

    table = Table(title=("dry run: " if not execute else "") + f"replay of {len(report.items)} dead letter(s)")
    for col in ("ref", "event id", "class", "to", "age", "status", "note"):
        table.add_column(col)
    for i in report.items:
        to = f"{i.topic}[{i.partition if i.partition is not None else 'by key'}]"
        if i.sent and "offset" in i.sent:
            to = f"{i.sent['topic']}[{i.sent['partition']}]@{i.sent['offset']}"
        note = i.reason or (i.sent or {}).get("error", "")
        table.add_row(i.letter.ref, i.letter.event_id or "", i.letter.error_class or "", to, human_duration(i.age),
                      f"[{_STATUS_COLORS.get(i.status, 'white')}]{i.status}[/]", escape(note))
    console.print(table)
    unsafe, failed = report.having("unsafe"), report.having("failed")
    refused = f", {len(unsafe)} refused as unsafe (--force to include)" if unsafe else ""
    if not execute:
        console.print(f"dry run: nothing sent. {len(report.having('ready'))} ready{refused}; run again with --execute to send.", highlight=False)
        return
    console.print(f"sent {len(report.having('sent'))} record(s)" + (f"; {len(failed)} failed" if failed else "")
                  + refused.replace(", ", "; ", 1) + ("; audit record written" if report.audit else ""), highlight=False)
