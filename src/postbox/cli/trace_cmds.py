"""`postbox trace EVENT_ID`: one event's whole path, from the outbox row to each group's verdict."""

from __future__ import annotations

from typing import Any, Optional

import typer

from postbox.cli.client_options import kafka_client_options, local_stack_env
from postbox.cli.incident_common import (
    JsonOpt,
    KafkaOpt,
    RedisOpt,
    event_id as parse_event_id,
    group_id,
    marker_ttl as resolve_ttl,
    PipelineOpt,
    number,
    pipeline_for,
    progress,
    settings_for,
)
from postbox.cli.output import console, print_json
from postbox.cli.record_output import safe


def register(app: typer.Typer) -> None:
    app.command("trace", help="One event's whole path: outbox row, Kafka record, each group's verdict.")(trace)


@kafka_client_options
def trace(
    event_id: str = typer.Argument(..., help="The event id (a UUID, or a stock outbox's id) from the outbox row or the record's `id` header."),
    topic: Optional[str] = typer.Option(None, "--topic", help="Search this topic (default: from the outbox row, else every outbox topic)."),
    group: Optional[list[str]] = typer.Option(None, "--group", "-g", callback=group_id, metavar="GROUP", help="Only this consumer group (repeatable)."),
    database_url: Optional[str] = typer.Option(None, "--database-url", help="A role that may read the outbox (else POSTBOX_ADMIN_DATABASE_URL, POSTBOX_MAINT_DATABASE_URL, the local stack's postbox_maint)."),
    marker_ttl: Optional[str] = typer.Option(None, "--marker-ttl", help="Dedupe marker TTL the apply times are estimated with (env POSTBOX_MARKER_TTL; default: each group's published TTL, else 8d)."),
    max_scan: int = typer.Option(2_000_000, "--max-scan", min=1, help="Examine at most this many Kafka records."),
    no_redis_scan: bool = typer.Option(False, "--no-redis-scan", help="Do not SCAN Redis for markers under other anchors."),
    pipeline: Optional[str] = PipelineOpt,
    json_output: bool = JsonOpt,
    kafka_bootstrap: Optional[str] = KafkaOpt,
    redis_url: Optional[str] = RedisOpt,
) -> int:
    from postbox.incident.trace import TraceRequest, run_trace

    request = TraceRequest(
        parse_event_id(event_id), resolve_ttl(marker_ttl), marker_ttl_flag=marker_ttl, topic=topic, groups=list(group or []) or None, database_url=database_url,
        local_maint_url=local_stack_env().get("POSTBOX_MAINT_DATABASE_URL"), max_scan=max_scan, scan_redis=not no_redis_scan,
        pipeline=pipeline_for(pipeline),
    )
    result = run_trace(request, settings_for(kafka_bootstrap=kafka_bootstrap, redis_url=redis_url), progress)
    if json_output:
        print_json(result.as_dict())
    else:
        _print_trace(result)
    return 1 if result.problem else 0


def _print_outbox(row: dict[str, Any]) -> None:
    if row["state"] == "found":
        committed = f", committed {row['committed_at']}" if row.get("committed_at") else ""
        console.print(f"  outbox   row in {safe(row['partition'])}: {safe(row['aggregate_type'])}/{safe(row['aggregate_id'])} {safe(row['event_type'])},"
                      f" created {row['created_at']}{committed}, {row['payload_bytes']} payload bytes", highlight=False)
    elif row["state"] == "absent":
        console.print("  outbox   no row (removed by retention, or never written)", highlight=False)
    else:
        console.print(f"  outbox   [yellow]{row['state']}[/]: {safe(row.get('reason', ''))}"
                      + (f" — {safe(row['fix'])}" if row.get("fix") else ""), highlight=False)


_STATUS_COLORS = {"applied": "green", "waiting": "yellow", "dead-lettered": "red", "failed": "red", "consumed-no-marker": "yellow"}


def _print_trace(result: Any) -> None:
    """The path, one line per stage; every value that came from a record or Redis is terminal-safe."""
    console.print(f"[bold]event {safe(result.event_id)}[/]", highlight=False)
    _print_outbox(result.outbox)
    rec = result.record
    if rec is not None:
        dup = f" (+{len(result.records) - 1} redelivered copies)" if len(result.records) > 1 else ""
        console.print(f"  kafka    {safe(rec.topic)}[{rec.partition}]@{rec.offset} at {rec.timestamp}, key {safe(rec.key_text)}{dup}", highlight=False)
    else:
        console.print(f"  kafka    not found in {safe(', '.join(result.topics_searched) or 'no topic')} ({result.scanned:,} records searched)", highlight=False)
    for g in result.groups:
        marker = f", marker {g.marker['key']}" if g.marker else ""
        console.print(f"  group    {safe(g.group)}: [{_STATUS_COLORS.get(g.status, 'white')}]{g.status}[/] (committed {number(g.committed)},"
                      f" {g.members} member(s){safe(marker)})", highlight=False)
        console.print(f"           {safe(g.summary)}", highlight=False)
    for d in result.dead_letters:
        console.print(f"  dlq      {safe(d.ref)} group {safe(d.group)}: {safe(d.error_class)}: {safe(d.error)}", highlight=False)
    for note in result.notes:
        console.print(f"  [dim]note: {safe(note)}[/]", highlight=False)
    color = "red" if result.problem else ("yellow" if result.status == "waiting" else "green")
    console.print(f"[bold {color}]verdict:[/] {safe(result.verdict)}", highlight=False)
