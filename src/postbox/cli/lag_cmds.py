"""`postbox lag [GROUP]`: per group and partition, committed, end, lag and the oldest unconsumed
record's age; then the replication slot and the connector (lag upstream of Kafka)."""

from __future__ import annotations

from typing import Any, Optional

import typer
from rich.markup import escape

from postbox.cli.client_options import kafka_client_options
from postbox.cli.incident_common import ConnectOpt, DbOpt, KafkaOpt, PipelineOpt, kafka_for, pipeline_for, settings_for
from postbox.cli.output import (
    JsonAliasOpt,
    Listing,
    OutputFormat,
    OutputOpt,
    err_console,
    note,
    output_format,
    print_json,
    print_listing,
)
from postbox.incident.records import printable


def register(app: typer.Typer) -> None:
    app.command("lag", help="Per group and partition: committed, end, lag, oldest unconsumed; slot and connector.")(lag)


@kafka_client_options
def lag(
    group: Optional[str] = typer.Argument(None, help="One consumer group (default: every group reading outbox topics)."),
    topic: Optional[str] = typer.Option(None, "--topic", help="Only this topic."),
    all_topics: bool = typer.Option(False, "--all-topics", help="Include groups' non-outbox topics."),
    max_lag: Optional[int] = typer.Option(None, "--max-lag", min=0, help="Exit 1 when any group's lag exceeds this, or the connector or replication slot is not streaming (for cron alerts; says which check tripped)."),
    max_slot_lag: Optional[int] = typer.Option(None, "--max-slot-lag", min=0, metavar="BYTES", help="Also exit 1 when the replication slot's lag (WAL Debezium has not confirmed) exceeds this many bytes: a stuck connector that still says RUNNING."),
    output: Optional[OutputFormat] = OutputOpt,
    json_output: bool = JsonAliasOpt,
    kafka_bootstrap: Optional[str] = KafkaOpt,
    connect_url: Optional[str] = ConnectOpt,
    database_url: Optional[str] = DbOpt,
    pipeline: Optional[str] = PipelineOpt,
) -> int:
    from postbox.incident.lag import group_lag, max_lag_alerts, now_ms, pipeline_state

    fmt = output_format(output, json_output)
    chosen = pipeline_for(pipeline)
    settings = settings_for(kafka_bootstrap=kafka_bootstrap, connect_url=connect_url, database_url=database_url)
    with kafka_for(settings) as kafka:
        kafka.ping()
        if topic:
            kafka.require_topic(topic)
        groups = group_lag(kafka, [group] if group else None, all_topics=all_topics, topic=topic)
    pipe = pipeline_state(settings.database_url, settings.connect_url, chosen.connector, chosen.slot)
    now = now_ms()
    alerting = max_lag is not None or max_slot_lag is not None
    alerts = max_lag_alerts(groups, pipe, max_lag, max_slot_lag) if alerting else []
    over = max_lag is not None and any(g.total > max_lag for g in groups)
    if fmt is OutputFormat.json:
        print_json({"groups": [g.as_dict(now) for g in groups], **pipe, "max_lag_exceeded": over, "alerts": alerts})
    else:
        print_listing(_partitions(groups, now), fmt)
        if not groups:
            note("no consumer group has committed offsets on outbox topics", fmt)
        members = _members(groups)
        if members.rows and fmt is OutputFormat.table:
            print_listing(members, fmt)
        _print_pipeline(pipe, fmt)
    for alert in alerts:
        err_console.print(f"[bold red]alert:[/] {escape(printable(alert))}", highlight=False)
    return 1 if alerts else 0


def _partitions(groups: list[Any], now: int) -> Listing:
    from postbox.incident.redis_state import human_duration

    listing = Listing("consumer lag", ("group", "state", "members", "topic", "p", "committed", "end", "lag", "oldest unconsumed", "consumer",
                                       "nodes"),
                      right=("members", "p", "committed", "end", "lag", "oldest unconsumed"))
    for g in groups:
        owner = {tp: _who(m) for m in g.consumers for tp in m.assignments}
        for p in g.partitions:
            age = human_duration((now - p.oldest_unconsumed_ms) / 1000) if p.oldest_unconsumed_ms else ""
            listing.add(g.group, g.state, g.members, p.topic, p.partition, p.committed, p.end, p.lag, age, owner.get((p.topic, p.partition), ""),
                        p.nodes(), style="red" if p.lag or p.leader is None else None)
    return listing


def _who(member: Any) -> str:
    """A member as client-id@host, with its static instance id when it has one."""
    return f"{member.client_id}@{member.host}" + (f" ({member.instance_id})" if member.instance_id else "")


def _members(groups: list[Any]) -> Listing:
    """Who is consuming: one row per member (client id, host, static instance id, its partitions)."""
    listing = Listing("group members", ("group", "client id", "host", "instance id", "partitions"))
    for g in groups:
        for m in g.consumers:
            parts = ", ".join(f"{t}[{p}]" for t, p in sorted(m.assignments))
            listing.add(g.group, m.client_id, m.host, m.instance_id or "", parts)
    return listing


def _print_pipeline(pipe: dict[str, Any], fmt: OutputFormat) -> None:
    from postbox.slot import describe as describe_slot

    slot, conn = pipe["slot"], pipe["connector"]
    note(f"replication slot {slot.get('name')}: {describe_slot(slot)}", fmt)
    tasks = ", ".join(f"task {t['id']} {t['state']}" + (f" ({t['error']})" if t.get("error") else "") for t in conn.get("tasks", []))
    note(f"connector {conn['name']}: {conn['state']}" + (f"; {tasks}" if tasks else "") + (f" ({conn['error']})" if conn.get("error") else ""), fmt)
