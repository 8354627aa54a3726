"""`postbox doctor`: every precondition of the pipeline, one line per check with the fix."""

from __future__ import annotations

from typing import Optional

import typer
from rich.markup import escape

from postbox.cli.client_options import export_local_stack_env, kafka_client_options
from postbox.cli.incident_common import ConnectOpt, DbOpt, JsonOpt, KafkaOpt, PipelineOpt, RedisOpt, pipeline_for, settings_for
from postbox.cli.output import console, print_json

_MARKS = {"ok": "[green]✓[/]", "warn": "[yellow]![/]", "fail": "[red]✗[/]", "skip": "[dim]-[/]"}


def register(app: typer.Typer) -> None:
    app.command("doctor", help="Check every precondition of the pipeline; one line per check with the fix.")(doctor)


@kafka_client_options
def doctor(
    json_output: bool = JsonOpt,
    kafka_bootstrap: Optional[str] = KafkaOpt,
    redis_url: Optional[str] = RedisOpt,
    connect_url: Optional[str] = ConnectOpt,
    database_url: Optional[str] = DbOpt,
    pipeline: Optional[str] = PipelineOpt,
) -> int:
    from postbox.incident.doctor import run_checks
    from postbox.kafka_cluster import Kafka

    export_local_stack_env()  # the durability check reads the stack's declared fsync policy, as consume's does
    settings = settings_for(kafka_bootstrap=kafka_bootstrap, redis_url=redis_url, connect_url=connect_url, database_url=database_url)
    checks = run_checks(settings, None, lambda: Kafka(settings.kafka_bootstrap, properties=settings.kafka_properties), pipeline_for(pipeline))
    failed = [c for c in checks if c.status == "fail"]
    if json_output:
        print_json({"ok": not failed, "checks": [c.as_dict() for c in checks]})
        return 1 if failed else 0
    for c in checks:
        fix = f"\n    [bold]fix:[/] {escape(c.fix)}" if c.fix and c.status != "ok" else ""
        console.print(f"{_MARKS[c.status]} {c.name}: {escape(c.detail)}{fix}", highlight=False)
    warns = sum(1 for c in checks if c.status == "warn")
    console.print(f"{len(checks)} checks: {len(failed)} failed, {warns} warning(s)", highlight=False)
    return 1 if failed else 0
