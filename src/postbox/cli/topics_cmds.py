"""`postbox topics`: the outbox topics and their dead-letter topics, with offsets and retention."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Optional

import typer
from postbox.cli.client_options import kafka_client_options
from postbox.cli.incident_common import KafkaOpt, kafka_for, settings_for
from postbox.cli.output import JsonAliasOpt, Listing, OutputFormat, OutputOpt, note, output_format, print_json, print_listing
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
    output: Optional[OutputFormat] = OutputOpt,
    json_output: bool = JsonAliasOpt,
    kafka_bootstrap: Optional[str] = KafkaOpt,
) -> int:
    fmt = output_format(output, json_output)
    settings = settings_for(kafka_bootstrap=kafka_bootstrap)
    with kafka_for(settings) as kafka:
        names = [t for t in kafka.topic_names() if all_topics or t.startswith(TOPIC_PREFIX) or t.endswith(DLQ_SUFFIX)]
        infos = kafka.describe_topics(names)
    if fmt is OutputFormat.json:
        print_json({"bootstrap": settings.kafka_bootstrap, "topics": [i.as_dict() for i in infos]})
        return 0
    print_listing(_listing(settings.kafka_bootstrap, infos, fmt), fmt)
    if not infos:
        note("no outbox topics yet (the router creates outbox.event.<aggregate_type> on the first event)", fmt)
    return 0


def _listing(bootstrap: str, infos: list[Any], fmt: OutputFormat) -> Listing:
    """One row per topic; in the table form its partitions below it, in TSV one row per partition."""
    listing = Listing(f"topics on {bootstrap}", ("topic", "p", "earliest", "latest", "messages", "retention"),
                      right=("p", "earliest", "latest", "messages"))
    for info in infos:
        retention = _retention(info.retention_ms) + ("" if (info.cleanup_policy or "delete") == "delete" else f" {info.cleanup_policy}")
        if fmt is OutputFormat.tsv:
            for part in info.partitions:
                listing.add(info.name, part.partition, part.low, part.high, part.messages, retention)
            continue
        listing.add(info.name, len(info.partitions), None, None, info.messages, retention,
                    style="red" if info.kind == "dlq" and info.messages else None)
        if len(info.partitions) > 1 or info.messages:
            for part in info.partitions:
                listing.add("", part.partition, part.low, part.high, part.messages, "", style="dim")
    return listing
