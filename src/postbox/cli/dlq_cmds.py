"""`postbox dlq list|show|replay`: dead letters, and replaying them to their origin (dry run by default)."""

from __future__ import annotations

from contextlib import closing
from datetime import timedelta
from typing import Any, Optional

import typer

from postbox.cli.client_options import kafka_client_options
from postbox.cli.incident_common import (
    JsonOpt,
    KafkaOpt,
    RedisOpt,
    YesOpt,
    confirm,
    duration,
    event_id as parse_event_id,
    kafka_for,
    marker_ttl as resolve_ttl,
    progress,
    settings_for,
    shorten,
    time_point,
    write_audit,
)
from postbox.cli.output import (
    JsonAliasOpt,
    Listing,
    OutputFormat,
    OutputOpt,
    console,
    err_console,
    note,
    output_format,
    print_json,
    print_listing,
)
from postbox.cli.record_output import print_record, safe
from postbox.errors import PostboxError

dlq_app = typer.Typer(help="Dead letters: list, show, replay to the origin topic (dry run by default).", no_args_is_help=True)

TopicOpt = typer.Option(None, "--topic", help="An origin topic or its .dlq (default: every *.dlq).")


def register(app: typer.Typer) -> None:
    app.add_typer(dlq_app, name="dlq")


@dlq_app.command("list", help="Dead letters, newest last: ref, event, group, error class and message.")
@kafka_client_options
def dlq_list(
    topic: Optional[str] = TopicOpt,
    event_id: Optional[list[str]] = typer.Option(None, "--event-id", metavar="EVENT_ID", help="Only this event (repeatable)."),
    error_class: Optional[str] = typer.Option(None, "--error-class", help="Only this error class (DecodeError, EffectFailed, EffectFailed:WRONGTYPE, ...)."),
    group: Optional[str] = typer.Option(None, "--group", help="Only dead letters of this consumer group."),
    since: Optional[str] = typer.Option(None, "--since", help="Only dead letters from this time (ISO) or this long ago (e.g. 2h)."),
    until: Optional[str] = typer.Option(None, "--until", help="Only dead letters from before this time (ISO) or this long ago."),
    limit: int = typer.Option(100, "--limit", "-n", min=1, help="Show at most this many (the newest)."),
    max_scan: int = typer.Option(200_000, "--max-scan", min=1, help="Examine at most this many records."),
    output: Optional[OutputFormat] = OutputOpt,
    json_output: bool = JsonAliasOpt,
    kafka_bootstrap: Optional[str] = KafkaOpt,
) -> int:
    from postbox.incident.dlq import Selection, dlq_topics, read_dead_letters

    fmt = output_format(output, json_output)
    ids = [parse_event_id(e, "--event-id") for e in (event_id or [])]
    start, end = time_point(since, "--since"), time_point(until, "--until")
    settings = settings_for(kafka_bootstrap=kafka_bootstrap)
    with kafka_for(settings) as kafka:
        names = dlq_topics(kafka, topic)
        letters, scanned, complete = read_dead_letters(
            kafka, names, Selection(ids, error_class, group),
            since=start, until=end, max_scan=max_scan, progress=progress("reading dead letters"),
        )
    shown = letters[-limit:]
    if fmt is OutputFormat.json:
        print_json({"topics": names, "scanned": scanned, "complete": complete, "total": len(letters),
                    "dead_letters": [d.as_dict() for d in shown]})
        return 0
    listing = Listing(f"dead letters ({len(letters)} in {', '.join(names) or 'no DLQ topic'})",
                      ("ref", "dead-lettered", "event id", "type", "key", "group", "class", "error"))
    for d in shown:
        error = d.error or ""
        listing.add(d.ref, d.record.timestamp, d.event_id, d.record.meta.event_type, d.record.key_text, d.group, d.error_class,
                    shorten(error, 70) if fmt is OutputFormat.table else error)
    print_listing(listing, fmt)
    if not complete:
        err_console.print(f"[yellow]stopped after {scanned:,} records (--max-scan)[/]")
    return 0


@dlq_app.command("show", help="One dead letter in full (error, origin, attempts, decoded record), by ref or event id.")
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
            letters, _, _ = read_dead_letters(kafka, dlq_topics(kafka, topic), Selection([eid or which]), progress=progress("searching dead letters"))
    if not letters:
        raise PostboxError(f"no dead letter for event {eid}", fix=f"`postbox trace {eid}` shows where the event is")
    if json_output:
        print_json({"dead_letters": [d.as_dict(full=True) for d in letters]})
        return 0
    for d in letters:
        _print_letter(d)
    return 0


def _print_letter(d: Any) -> None:
    console.print(f"[bold]{safe(d.ref)}[/]  dead-lettered {d.record.timestamp} by group [bold]{safe(d.group)}[/] after {d.attempts} attempt(s)",
                  highlight=False)
    console.print(f"  [red]{safe(d.error_class)}[/]: {safe(d.error)}", highlight=False)
    console.print(f"  origin {safe(d.origin_topic)}[{d.origin_partition}]@{d.origin_offset}, created {d.as_dict()['created_at']}", highlight=False)
    if d.reference_only:
        console.print(f"  [yellow]reference-only[/]: the original record ({d.original_bytes or '?'} bytes) was too large for"
                      f" {safe(d.record.topic)} and stays at its origin offset; `postbox dlq replay` reads it from there", highlight=False)
    print_record(d.record)


@dlq_app.command("replay", help="Send dead letters back to their origin topic; a dry run unless --execute; says which groups already applied each.")
@kafka_client_options
def dlq_replay(
    topic: Optional[str] = TopicOpt,
    event_id: Optional[list[str]] = typer.Option(None, "--event-id", metavar="EVENT_ID", help="Replay this event (repeatable)."),
    error_class: Optional[str] = typer.Option(None, "--error-class", help="Replay every dead letter of this error class."),
    group: Optional[str] = typer.Option(None, "--group", help="Only dead letters of this group."),
    all_letters: bool = typer.Option(False, "--all", help="Replay every dead letter (of --topic, if given)."),
    since: Optional[str] = typer.Option(None, "--since", help="Only dead letters from this time (ISO) or this long ago (e.g. 2h)."),
    until: Optional[str] = typer.Option(None, "--until", help="Only dead letters from before this time (ISO) or this long ago."),
    execute: bool = typer.Option(False, "--execute", help="Send the records (default: dry run, show what would be sent)."),
    force: bool = typer.Option(False, "--force", help="Also replay events whose dedupe markers may have expired."),
    marker_ttl: Optional[str] = typer.Option(None, "--marker-ttl", help="Dedupe marker TTL to check against (env POSTBOX_MARKER_TTL; "
                                             "default: the shortest TTL published by the groups reading the origin topic, else 8d)."),
    margin: str = typer.Option("1h", "--safety-margin", help="Treat markers as expired this long before the TTL ends."),
    yes: bool = YesOpt,
    output: Optional[OutputFormat] = OutputOpt,
    json_output: bool = JsonAliasOpt,
    kafka_bootstrap: Optional[str] = KafkaOpt,
    redis_url: Optional[str] = RedisOpt,
) -> int:
    from postbox.incident.dlq import Selection, dlq_topics, execute_replay, prepare_replay, replay_audit
    from postbox.incident.redis_state import RedisState, published_marker_ttls

    fmt = output_format(output, json_output)
    ids = [parse_event_id(e, "--event-id") for e in (event_id or [])]
    if not (ids or error_class or all_letters):
        raise typer.BadParameter("choose what to replay: --event-id, --error-class or --all", param_hint="selection")
    chosen = {"event_ids": ids, "error_class": error_class, "group": group, "all": all_letters, "topic": topic, "since": since, "until": until}
    ttl = resolve_ttl(marker_ttl)
    safety = duration(margin, "--safety-margin") or timedelta(0)
    settings = settings_for(kafka_bootstrap=kafka_bootstrap, redis_url=redis_url)
    state = RedisState(settings.redis_url)
    with kafka_for(settings) as kafka, closing(state):
        report = prepare_replay(kafka, dlq_topics(kafka, topic), Selection(ids, error_class, group), marker_ttl=ttl, margin=safety,
                                force=force, redis_state=state, progress=progress("reading dead letters"),
                                since=time_point(since, "--since"), until=time_point(until, "--until"),
                                group_ttls=published_marker_ttls(state.client, marker_ttl))
        ready = report.having("ready")
        if execute and ready:
            confirm(f"send {len(ready)} dead letter(s) back to {report.destinations}?", yes)
            execute_replay(kafka, report)
            report.audit = write_audit(kafka, replay_audit(report, chosen, force))
    if fmt is OutputFormat.json:
        report.executed = execute
        print_json(report.as_dict())
    else:
        _print_replay(report, execute, fmt)
    return 1 if report.problem else 0


_STATUS_STYLES = {"ready": "cyan", "sent": "green", "unsafe": "red", "failed": "red", "duplicate": "dim", "no-origin": "red"}


def _replay_target(item: Any) -> str:
    """Where a replayed letter goes (topic[partition]), or went once sent (…@offset)."""
    if item.sent and "offset" in item.sent:
        return f"{item.sent['topic']}[{item.sent['partition']}]@{item.sent['offset']}"
    return f"{item.topic}[{item.partition if item.partition is not None else 'by key'}]"


def _print_replay(report: Any, execute: bool, fmt: OutputFormat) -> None:
    from postbox.incident.redis_state import human_duration

    listing = Listing(("dry run: " if not execute else "") + f"replay of {len(report.items)} dead letter(s)",
                      ("ref", "event id", "class", "to", "age", "status", "applied by", "note"))
    for i in report.items:
        applied = ", ".join(a["group"] for a in i.applied_by)
        listing.add(i.letter.ref, i.letter.event_id, i.letter.error_class, _replay_target(i), human_duration(i.age), i.status, applied,
                    i.reason or (i.sent or {}).get("error", ""), style=_STATUS_STYLES.get(i.status))
    print_listing(listing, fmt)
    for text in report.notes:
        note(f"note: {text}", fmt)
    unsafe, failed = report.having("unsafe"), report.having("failed")
    refused = f", {len(unsafe)} refused as unsafe (--force to include)" if unsafe else ""
    skipped = sum(1 for i in report.items if i.applied_by)
    already = f"; {skipped} already applied by a group (its consumers will skip it)" if skipped else ""
    if not execute:
        note(f"dry run: nothing sent. {len(report.having('ready'))} ready{refused}{already}; run again with --execute to send.", fmt)
        return
    note(f"sent {len(report.having('sent'))} record(s)" + (f"; {len(failed)} failed" if failed else "")
         + refused.replace(", ", "; ", 1) + already + ("; audit record written" if report.audit else ""), fmt)
