"""`postbox topics`: the outbox topics and their dead-letter topics, with offsets and retention."""

from __future__ import annotations

from datetime import timedelta
from typing import Optional

import typer
from rich.table import Table

from postbox.cli.client_options import kafka_client_options
from postbox.cli.incident_common import JsonOpt, KafkaOpt, kafka_for, number, settings_for
from postbox.cli.output import console, print_json
from postbox.topics import DLQ_SUFFIX, TOPIC_PREFIX


def register(app: typer.Typer) -> None:
    app.command("topics", help="Outbox topics and their DLQs: partitions, earliest/latest offsets, messages, retention.")(topics)


def _retention(ms: Optional[int]) -> str:
    if ms is None:
        return "?"
    if ms < 0:
        return "forever"
    from postbox.incident.redis_state import human_duration

    return human_duration(timedelta(milliseconds=ms))


@kafka_client_options
def topics(
    all_topics: bool = typer.Option(False, "--all", help="Every topic, not only outbox.event.* and *.dlq."),
    json_output: bool = JsonOpt,
    kafka_bootstrap: Optional[str] = KafkaOpt,
) -> int:
    settings = settings_for(kafka_bootstrap=kafka_bootstrap)
    with kafka_for(settings) as kafka:
        names = [t for t in kafka.topic_names() if all_topics or t.startswith(TOPIC_PREFIX) or t.endswith(DLQ_SUFFIX)]
        infos = kafka.describe_topics(names)
    if json_output:
        print_json({"bootstrap": settings.kafka_bootstrap, "topics": [i.as_dict() for i in infos]})
        return 0
    table = Table(title=f"topics on {settings.kafka_bootstrap}")
    table.add_column("topic", overflow="fold", ratio=3)
    for col, width in (("p", 2), ("earliest", 8), ("latest", 8), ("messages", 8), ("retention", 9)):
        table.add_column(col, justify="right", no_wrap=True, min_width=width)
    for info in infos:
        style = "red" if info.kind == "dlq" and info.messages else None
        retention = f"{_retention(info.retention_ms)}" + ("" if (info.cleanup_policy or "delete") == "delete" else f" {info.cleanup_policy}")
        table.add_row(info.name, f"{len(info.partitions)}", "", "", number(info.messages), retention, style=style)
        if len(info.partitions) > 1 or info.messages:
            for part in info.partitions:
                table.add_row("", f"[dim]{part.partition}[/]", number(part.low), number(part.high), number(part.messages), "", style="dim")
        table.add_section()
    console.print(table)
    if not infos:
        console.print("no outbox topics yet (the router creates outbox.event.<aggregate_type> on the first event)")
    return 0
