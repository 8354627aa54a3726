"""`postbox lag [GROUP]`: per group and partition, committed, end, lag and the oldest unconsumed
record's age; then the replication slot and the connector (lag upstream of Kafka)."""

from __future__ import annotations

from typing import Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from postbox.cli.client_options import kafka_client_options
from postbox.cli.incident_common import ConnectOpt, DbOpt, JsonOpt, KafkaOpt, kafka_for, number, settings_for
from postbox.cli.output import console, err_console, print_json


def register(app: typer.Typer) -> None:
    app.command("lag", help="Per group and partition: committed, end, lag, oldest unconsumed; slot and connector.")(lag)


@kafka_client_options
def lag(
    group: Optional[str] = typer.Argument(None, help="One consumer group (default: every group reading outbox topics)."),
    topic: Optional[str] = typer.Option(None, "--topic", help="Only this topic."),
    all_topics: bool = typer.Option(False, "--all-topics", help="Include groups' non-outbox topics."),
    max_lag: Optional[int] = typer.Option(None, "--max-lag", min=0, help="Exit 1 when any group's lag exceeds this, or the connector or replication slot is not streaming (for cron alerts; says which check tripped)."),
    json_output: bool = JsonOpt,
    kafka_bootstrap: Optional[str] = KafkaOpt,
    connect_url: Optional[str] = ConnectOpt,
    database_url: Optional[str] = DbOpt,
) -> int:
    from postbox.connector import default_connector_name
    from postbox.incident.lag import group_lag, max_lag_alerts, now_ms, pipeline_state

    settings = settings_for(kafka_bootstrap=kafka_bootstrap, connect_url=connect_url, database_url=database_url)
    with kafka_for(settings) as kafka:
        kafka.ping()
        if topic:
            kafka.require_topic(topic)
        groups = group_lag(kafka, [group] if group else None, all_topics=all_topics, topic=topic)
    pipe = pipeline_state(settings.database_url, settings.connect_url, default_connector_name())
    now = now_ms()
    alerts = max_lag_alerts(groups, pipe, max_lag) if max_lag is not None else []
    over = max_lag is not None and any(g.total > max_lag for g in groups)
    if json_output:
        print_json({"groups": [g.as_dict(now) for g in groups], **pipe, "max_lag_exceeded": over, "alerts": alerts})
        return 1 if alerts else 0
    _print_groups(groups, now)
    _print_pipeline(pipe)
    for alert in alerts:
        err_console.print(f"[bold red]alert:[/] {escape(alert)}", highlight=False, soft_wrap=True)
    return 1 if alerts else 0


def _print_groups(groups: list[Any], now: int) -> None:
    from postbox.incident.redis_state import human_duration

    table = Table(title="consumer lag")
    for col, just in (("group", "left"), ("state", "left"), ("topic", "left"), ("p", "right"), ("committed", "right"),
                      ("end", "right"), ("lag", "right"), ("oldest unconsumed", "right")):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for g in groups:
        state = f"{g.state} ({g.members} member{'s' if g.members != 1 else ''})"
        for i, p in enumerate(g.partitions):
            age = human_duration((now - p.oldest_unconsumed_ms) / 1000) if p.oldest_unconsumed_ms else ""
            table.add_row(g.group if i == 0 else "", state if i == 0 else "", p.topic, str(p.partition), number(p.committed),
                          number(p.end), f"[{'red' if p.lag else 'green'}]{p.lag:,}[/]", age)
        table.add_section()
    console.print(table)
    if not groups:
        console.print("no consumer group has committed offsets on outbox topics")


def _print_pipeline(pipe: dict[str, Any]) -> None:
    from postbox.slot import describe as describe_slot

    slot, conn = pipe["slot"], pipe["connector"]
    console.print(f"replication slot {slot.get('name')}: {describe_slot(slot)}", highlight=False)
    tasks = ", ".join(f"task {t['id']} {t['state']}" + (f" ({t['error']})" if t.get("error") else "") for t in conn.get("tasks", []))
    console.print(f"connector {conn['name']}: {conn['state']}" + (f"; {tasks}" if tasks else "") + (f" ({conn['error']})" if conn.get("error") else ""), highlight=False)
