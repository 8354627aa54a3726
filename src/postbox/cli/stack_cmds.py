"""`postbox up`, `down`, `status` and `env`: the local stack from the command line."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from postbox.cli.client_options import command_settings, kafka_client_options
from postbox.cli.incident_common import PipelineOpt, pipeline_for
from postbox.cli.output import console, err_console, print_json
from postbox.errors import ConfigError
from postbox.slot import describe as describe_slot


def register(app: typer.Typer) -> None:
    app.command("up", help="Bring up the local stack (PostgreSQL, Redis, Kafka, Connect + Debezium) and register the connector.")(up)
    app.command("down", help="Stop the local stack cleanly (data is kept in the state folder).")(down)
    app.command("status", help="Each component's state and address, the connector and task, the slot's lag.")(status)
    app.command("env", help="Print `export` lines for the settings that point at the local stack.")(env)


def _stack(locate_tools: bool = True, kafka_nodes: Optional[int] = None, connect_workers: Optional[int] = None,
           redis_replicas: Optional[int] = None):
    """The local stack, in the topology `up` last recorded unless counts are given."""
    from postbox.stack.layout import StackLayout
    from postbox.stack.stack import LocalStack
    from postbox.stack.topology import choose

    layout = StackLayout.default()
    return LocalStack(layout, locate_tools=locate_tools, topology=choose(layout.run, kafka_nodes, connect_workers, redis_replicas))


def _process_rows(status: dict) -> list[tuple[str, dict]]:
    """(name, status line) of each process: every Kafka node, Connect worker, Redis node (with its
    role) and Sentinel (with the primary it names) of a larger topology."""
    rows = [("postgres", status["postgres"])]
    if status["sentinels"]:
        rows += [(n["name"], {**n, "address": f"{n['address']} ({n['role']})"}) for n in status["redis_nodes"]]
        rows += [(s["name"], {**s, "address": f"{s['address']} (primary: {s['primary'] or 'unknown'})"}) for s in status["sentinels"]]
    else:
        rows.append(("redis", status["redis"]))
    for kind, members in (("kafka", status["kafka_nodes"]), ("connect", status["connect_workers"])):
        rows += [(kind, status[kind])] if len(members) == 1 else [(m["name"], m) for m in members]
    return rows


def _progress(message: str) -> None:
    err_console.print(f"[dim]…[/] {message}", highlight=False)


def up(
    timeout: float = typer.Option(180.0, help="Seconds to wait for each component to become ready."),
    json_output: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    kafka_nodes: Optional[int] = typer.Option(
        None, "--kafka-nodes", metavar="N",
        help="Kafka nodes (each broker + KRaft controller; 3: replication factor 3, min.insync.replicas 2). "
             "Default: what the last `up` here used, else 1. Remembered for status and down."),
    connect_workers: Optional[int] = typer.Option(
        None, "--connect-workers", metavar="M",
        help="Kafka Connect distributed workers (2: the connector's task moves when its worker dies). "
             "Default: what the last `up` here used, else 1."),
    redis_replicas: Optional[int] = typer.Option(
        None, "--redis-replicas", metavar="R",
        help="Redis replicas of the primary, with 3 Sentinels that promote one when the primary dies; the stack's "
             "consumers then connect through the Sentinels. Default: what the last `up` here used, else 0."),
) -> None:
    stack = _stack(kafka_nodes=kafka_nodes, connect_workers=connect_workers, redis_replicas=redis_replicas)
    report = stack.up(_progress, wait_timeout=timeout)
    status = stack.status()
    if json_output:
        print_json({
            "changed": report.changed,
            "seconds": round(report.seconds, 1),
            "steps": [{"component": s.component, "outcome": s.outcome, "changed": s.changed} for s in report.steps],
            "status": status,
        })
        return
    outcomes = {s.component: s.outcome for s in report.steps}
    table = Table(title="postbox local stack", box=None, pad_edge=False)
    for column in ("component", "this run", "listens on / state"):
        table.add_column(column, no_wrap=True)
    for name, line in _process_rows(status):
        table.add_row(name, outcomes.get(name, ""), line["address"])
    connector = status["connector"]
    table.add_row(
        f"connector {connector['name']}",
        outcomes.get(f"connector/{connector['name']}", ""),
        f"{connector['state']}, task {status['task']['state']}",
    )
    console.print(table)
    console.print("logs:", highlight=False)
    for name, line in _process_rows(status):
        console.print(f"  {name:<9} {line['log']}", highlight=False, soft_wrap=True)
    if report.changed:
        console.print(f"[green]stack is up[/] in {report.seconds:.1f} s")
    else:
        console.print(f"[green]stack was already up[/]: nothing to do ({report.seconds:.1f} s)")
    console.print("point your shell at it: [bold]eval \"$(postbox env)\"[/]")


def down() -> None:
    stack = _stack(locate_tools=False)
    steps = stack.down(_progress)
    for step in steps:
        console.print(f"{step.component}: {step.outcome}")


def status(
    json_output: bool = typer.Option(False, "--json", help="Print the status as JSON."),
    pipeline: Optional[str] = PipelineOpt,
) -> None:
    """Exit 0 when the stack is healthy, 1 otherwise (with or without --json)."""
    from postbox.stack.stack import healthy as is_healthy

    stack = _stack(locate_tools=False)
    data = stack.status(pipeline_for(pipeline))
    healthy = is_healthy(data)
    if json_output:
        print_json({**data, "healthy": healthy})
        raise typer.Exit(0 if healthy else 1)
    table = Table(title=f"postbox local stack ({data['state_dir']})", box=None, pad_edge=False)
    for column in ("component", "state", "address", "pid"):
        table.add_column(column, no_wrap=True)
    for name, part in _process_rows(data):
        color = "green" if part["state"] == "running" else "red"
        table.add_row(name, f"[{color}]{part['state']}[/]", part["address"], str(part["pid"] or ""))
    console.print(table)
    _print_topology(data["topology"])
    _print_connector(data)
    slot = data["slot"]
    console.print(f"replication slot {slot.get('name', '')}: {describe_slot(slot)}", highlight=False)
    console.print("logs:", highlight=False)
    for name, part in _process_rows(data):
        console.print(f"  {name:<9} {part['log']}", highlight=False, soft_wrap=True)
    raise typer.Exit(0 if healthy else 1)


def _print_topology(topology: dict[str, Any]) -> None:
    """The node counts, only when the stack runs more than one Kafka node, Connect worker or Redis node."""
    if topology["kafka_nodes"] > 1 or topology["connect_workers"] > 1 or topology["redis_replicas"]:
        redis = f", Redis {topology['redis_replicas']} replica(s) + {topology['sentinels']} Sentinels" if topology["redis_replicas"] else ""
        console.print(f"topology: {topology['kafka_nodes']} Kafka nodes, {topology['connect_workers']} Connect workers, "
                      f"replication factor {topology['replication_factor']}, min.insync.replicas {topology['min_insync_replicas']}{redis}",
                      highlight=False)


def _print_connector(data: dict[str, Any]) -> None:
    """The connector's and its task's state, and which worker runs the task when there are several."""
    connector, task = data["connector"], data["task"]
    where = [t["worker"] for t in task.get("tasks", []) if t.get("worker")] if len(data["connect_workers"]) > 1 else []
    console.print(f"connector {connector['name']}: {connector['state']}; task: {task['state']}"
                  + (f" on worker {where[0]}" if where else "")
                  + (f" ({task['error']})" if task.get("error") else ""))


@kafka_client_options
def env(
    compose: bool = typer.Option(False, "--compose", help="the docker compose stack's URLs (passwords from --env-file) instead of the local stack's"),
    env_file: Path = typer.Option(Path("infra/.env"), "--env-file", help="the compose env file (with --compose)"),
    replicas: bool = typer.Option(False, "--replicas", help="with --compose: the replicated topology (infra/docker-compose.replicas.yml): "
                                  "every Kafka node, Redis through its Sentinels"),
) -> None:
    """The local stack's settings as `export` lines; the Kafka client properties in effect
    (POSTBOX_KAFKA_CONFIG, -X) follow as comments, secrets masked."""
    from postbox.kafka_config import ENV_VAR, redact

    if replicas and not compose:
        raise ConfigError("--replicas describes the docker compose topology", fix="add --compose (postbox env --compose --replicas)")
    if compose:
        from postbox.cli.compose_env import compose_env

        values = compose_env(env_file, replicas=replicas)
    else:
        values = _stack(locate_tools=False).env()
    for key, value in values.items():
        print(f"export {key}={shlex.quote(value)}")
    properties = command_settings().kafka_properties
    if properties.file is not None:
        print(f"export {ENV_VAR}={shlex.quote(str(properties.file))}")
    for key, value in redact(properties.values).items():
        print(f"# kafka property {key}={value}  (from {properties.origin(key)})")
