"""`postbox audit`: what was changed during incidents — who, when, what, how many."""

from __future__ import annotations

from typing import Optional

import typer
from rich.markup import escape
from rich.table import Table

from postbox.cli.client_options import kafka_client_options
from postbox.cli.incident_common import JsonOpt, KafkaOpt, duration, kafka_for, number, settings_for
from postbox.cli.output import console, print_json


def register(app: typer.Typer) -> None:
    app.command("audit", help="What was changed during incidents: who, when, what, how many.")(audit)


@kafka_client_options
def audit(
    since: Optional[str] = typer.Option(None, "--since", help="Only records from this long ago (e.g. 12h)."),
    command: Optional[str] = typer.Option(None, "--command", help="Only this command (replay, dlq replay, connector restart, ...)."),
    limit: int = typer.Option(100, "--limit", "-n", min=1, help="Show at most this many (the newest)."),
    json_output: bool = JsonOpt,
    kafka_bootstrap: Optional[str] = KafkaOpt,
) -> int:
    from postbox.incident.audit import audit_topic, read

    window = duration(since, "--since")
    settings = settings_for(kafka_bootstrap=kafka_bootstrap)
    with kafka_for(settings) as kafka:
        kafka.ping()
        records = read(kafka, since=window, limit=limit, command=command)
    if json_output:
        print_json({"topic": audit_topic(), "records": records})
        return 0
    table = Table(title=f"audit trail ({audit_topic()})")
    for col in ("at", "who", "command", "target", "count", "outcome"):
        table.add_column(col)
    for r in records:
        table.add_row(r.get("at", ""), f"{r.get('user')}@{r.get('host')}", r.get("command", ""), escape(str(r.get("target", ""))),
                      number(r.get("count")), r.get("outcome", ""))
    console.print(table)
    if not records:
        console.print("no audit records" + (" in that window" if window else ""))
    return 0
