"""`postbox audit`: what was changed during incidents — who, when, what, how many."""

from __future__ import annotations

from typing import Optional

import typer

from postbox.cli.client_options import kafka_client_options
from postbox.cli.incident_common import KafkaOpt, duration, kafka_for, settings_for
from postbox.cli.output import JsonAliasOpt, Listing, OutputFormat, OutputOpt, note, output_format, print_json, print_listing


def register(app: typer.Typer) -> None:
    app.command("audit", help="What was changed during incidents: who, when, what, how many.")(audit)


@kafka_client_options
def audit(
    since: Optional[str] = typer.Option(None, "--since", help="Only records from this long ago (e.g. 12h)."),
    command: Optional[str] = typer.Option(None, "--command", help="Only this command (replay, dlq replay, connector restart, ...)."),
    limit: int = typer.Option(100, "--limit", "-n", min=1, help="Show at most this many (the newest)."),
    output: Optional[OutputFormat] = OutputOpt,
    json_output: bool = JsonAliasOpt,
    kafka_bootstrap: Optional[str] = KafkaOpt,
) -> int:
    from postbox.incident.audit import audit_topic, read

    fmt = output_format(output, json_output)
    window = duration(since, "--since")
    settings = settings_for(kafka_bootstrap=kafka_bootstrap)
    with kafka_for(settings) as kafka:
        kafka.ping()
        records = read(kafka, since=window, limit=limit, command=command)
    if fmt is OutputFormat.json:
        print_json({"topic": audit_topic(), "records": records})
        return 0
    listing = Listing(f"audit trail ({audit_topic()})", ("at", "who", "command", "target", "count", "outcome"), right=("count",))
    for r in records:
        listing.add(r.get("at"), f"{r.get('user')}@{r.get('host')}", r.get("command"), r.get("target"), r.get("count"), r.get("outcome"))
    print_listing(listing, fmt)
    if not records:
        note("no audit records" + (" in that window" if window else ""), fmt)
    return 0
