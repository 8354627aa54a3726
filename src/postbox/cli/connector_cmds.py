"""`postbox connector status|restart|apply`: the Debezium connector on Kafka Connect."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from postbox.cli.client_options import kafka_client_options
from postbox.cli.incident_common import (
    ConnectOpt,
    JsonOpt,
    KafkaOpt,
    PipelineOpt,
    YesOpt,
    confirm,
    kafka_for,
    pipeline_for,
    settings_for,
    write_audit,
)
from postbox.cli.output import console, print_json

connector_app = typer.Typer(help="The Debezium connector on Kafka Connect: status, restart, apply.", no_args_is_help=True)

NameOpt = typer.Option(None, "--name", help="Connector name (default: the pipeline's, postbox-outbox for the default pipeline).")


def register(app: typer.Typer) -> None:
    app.add_typer(connector_app, name="connector")


def _name(flag: Optional[str], pipeline: Optional[str]) -> str:
    """--name, else the pipeline's connector; a name Connect's REST paths cannot carry is a usage error."""
    if flag is not None and (not flag.strip() or not flag.isprintable() or "/" in flag):
        # Connect's Jetty refuses an encoded '/' in a path (HTTP 400): such a name cannot be addressed
        raise typer.BadParameter(f"{flag!r} is not a connector name (printable, not empty, no '/')", param_hint="--name")
    return flag or pipeline_for(pipeline).connector


@connector_app.command("status", help="The connector's and its tasks' state, worker, first error line, slot and topics.")
def connector_status(
    name: Optional[str] = NameOpt,
    pipeline: Optional[str] = PipelineOpt,
    json_output: bool = JsonOpt,
    connect_url: Optional[str] = ConnectOpt,
) -> int:
    from postbox.connect_client import ConnectClient
    from postbox.incident.connector import connector_report

    settings = settings_for(connect_url=connect_url)
    with ConnectClient(settings.connect_url, timeout=5) as client:
        report = connector_report(client, _name(name, pipeline))
    data = report.as_dict()
    if json_output:
        print_json(data)
        return 0 if report.running else 1
    if not report.registered:
        console.print(f"connector {report.name}: [red]not registered[/] at {settings.connect_url} — `postbox connector apply{pipeline_for(pipeline).flag}`")
        return 1
    color = "green" if report.running else "red"
    console.print(f"connector [bold]{report.name}[/]: [{color}]{data['state']}[/] on {data['worker']}", highlight=False)
    for t in data["tasks"]:
        tc = "green" if t["state"] == "RUNNING" else "red"
        console.print(f"  task {t['id']}: [{tc}]{t['state']}[/] on {t['worker']}" + (f" — {escape(t['error'])}" if t["error"] else ""), highlight=False)
    cfg = data["config"]
    console.print(f"  slot {cfg.get('slot.name')}, publication {cfg.get('publication.name')}, tables {cfg.get('table.include.list')},"
                  f" topics {cfg.get('transforms.outbox.route.topic.replacement')}", highlight=False)
    return 0 if report.running else 1


@connector_app.command("restart", help="Restart the connector and its tasks, wait for RUNNING, audit it.")
@kafka_client_options
def connector_restart(
    name: Optional[str] = NameOpt,
    pipeline: Optional[str] = PipelineOpt,
    wait: float = typer.Option(60.0, "--wait", help="Seconds to wait for RUNNING afterwards (0: do not wait)."),
    yes: bool = YesOpt,
    json_output: bool = JsonOpt,
    connect_url: Optional[str] = ConnectOpt,
    kafka_bootstrap: Optional[str] = KafkaOpt,
) -> int:
    from postbox.connect_client import ConnectClient
    from postbox.errors import ConnectError
    from postbox.incident.connector import restart_audit

    settings = settings_for(connect_url=connect_url, kafka_bootstrap=kafka_bootstrap)
    cname = _name(name, pipeline)
    with ConnectClient(settings.connect_url, timeout=10) as client:
        before = client.status(cname)
        if before is None:
            raise ConnectError(f"connector {cname} is not registered at {settings.connect_url}", fix=f"`postbox connector apply{pipeline_for(pipeline).flag}`")
        confirm(f"restart connector {cname} and its tasks (now {before.connector_state})?", yes)
        client.restart(cname, include_tasks=True)
        outcome, state = "restarted", None
        if wait > 0:
            try:
                state = client.wait_running(cname, timeout=wait)
            except ConnectError as exc:
                outcome = f"restarted, not running: {exc.message}"
    with kafka_for(settings) as kafka:
        entry = write_audit(kafka, restart_audit(cname, before, state, ok=bool(state) or wait <= 0))
    ok = (state is not None or wait <= 0) and entry is not None
    if json_output:
        print_json({"name": cname, "outcome": outcome, "before": before.connector_state,
                    "after": state.connector_state if state else None, "audit": entry})
    else:
        console.print(f"connector {cname}: {outcome}" + (f", now {state.connector_state}" if state else "") + ("; audit record written" if entry else ""), highlight=False)
    return 0 if ok else 1


@connector_app.command("apply", help="Create or update the pipeline's connector from a JSON file (the packaged template by default) with the pipeline's names set over it; says which settings change.")
@kafka_client_options
def connector_apply(
    file: Optional[Path] = typer.Option(None, "--file", help="Connector JSON (default: the packaged template, connectors/outbox.json); the pipeline's name, slot, publication, table and topic.prefix are set over it."),
    pipeline: Optional[str] = PipelineOpt,
    database: Optional[str] = typer.Option(None, "--database", help="The database the connector captures (default: the Connect worker's POSTBOX_CDC_DB_NAME), for a pipeline in another database of the cluster."),
    topics_file: Optional[Path] = typer.Option(None, "--topics-file", help="Partitions/replication per aggregate type for new topics (JSON; env POSTBOX_TOPICS_FILE)."),
    yes: bool = YesOpt,
    wait: float = typer.Option(0.0, "--wait", help="Then wait up to this many seconds for connector and tasks to be RUNNING."),
    json_output: bool = JsonOpt,
    connect_url: Optional[str] = ConnectOpt,
    kafka_bootstrap: Optional[str] = KafkaOpt,
) -> int:
    from postbox.connect_client import ConnectClient, ConnectorFile
    from postbox.connector import render_connector
    from postbox.incident.connector import apply_audit, plan_apply
    from postbox.resources import CONNECTOR_TEMPLATE
    from postbox.topic_creation import TopicsConfig, connector_with_topics

    file = file or CONNECTOR_TEMPLATE
    rendered = render_connector(ConnectorFile.load(file), pipeline_for(pipeline), database)
    connector = connector_with_topics(rendered, TopicsConfig.load(topics_file))
    settings = settings_for(connect_url=connect_url, kafka_bootstrap=kafka_bootstrap)
    with ConnectClient(settings.connect_url, timeout=10) as client:
        plan = plan_apply(client, connector)
        outcome = "unchanged"
        if not plan.unchanged:
            confirm(plan.question(file), yes)
            outcome = client.apply(connector)
        if wait > 0:
            client.wait_running(connector.name, wait)
    entry = None
    if outcome != "unchanged":
        with kafka_for(settings) as kafka:
            entry = write_audit(kafka, apply_audit(plan, file, outcome))
    if json_output:
        print_json({"name": connector.name, "file": str(file), "outcome": outcome, "changed": plan.changes, "audit": entry})
    else:
        changed = f" ({', '.join(plan.changes)})" if plan.changes and outcome != "unchanged" else ""
        console.print(f"connector {connector.name}: {outcome}{changed}", highlight=False)
    return 0 if outcome == "unchanged" or entry is not None else 1
