"""`postbox up` / `down` / `status`: the local stack as one unit.

Start order follows the dependencies: jars, then PostgreSQL and Redis and Kafka (independent,
started together), then the outbox schema, then Connect (needs Kafka), then the connector (needs
Connect and PostgreSQL). Every step is idempotent and reports whether it changed anything, so a
second `up` says "nothing to do" and touches nothing.
"""

from __future__ import annotations

import fcntl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from postbox.connect_client import ConnectClient, ConnectorFile
from postbox.connector import connector_status, render_connector
from postbox.database_url import database_url
from postbox.secret_env import env_value
from postbox.topic_creation import TopicsConfig, connector_with_topics
from postbox.errors import StackError
from postbox.pipelines import DEFAULT, Pipeline
from postbox.resources import CONNECTOR_TEMPLATE
from postbox.slot import slot_status
from postbox.stack import jars, prereqs
from postbox.stack.layout import StackLayout
from postbox.stack.nodes import bootstrap, connect_workers, group_status, init_all, kafka_nodes, process_status
from postbox.stack.ports import StackPorts
from postbox.stack.postgres import DATABASE, LocalPostgres
from postbox.stack.redis_group import LocalRedisGroup
from postbox.stack.secrets import ensure_secrets, read_secrets
from postbox.stack.topology import Topology


#: Where `up` and `down` report what they are doing, one line at a time.
Say = Callable[[str], None]


@dataclass
class Step:
    component: str
    outcome: str
    changed: bool


@dataclass
class UpReport:
    steps: list[Step] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def changed(self) -> bool:
        return any(step.changed for step in self.steps)


class LocalStack:
    """The parts of the local stack and the connector, under one state folder.

    ``topology``: how many Kafka nodes and Connect workers; default, the one `up` last recorded
    in the state folder (one and one when none was). ``kafka`` and ``connect`` are the first node
    and worker (the only ones of the plain stack)."""

    def __init__(self, layout: StackLayout | None = None, ports: StackPorts | None = None, locate_tools: bool = True,
                 topology: Topology | None = None) -> None:
        self.layout = layout or StackLayout.default()
        self.ports = ports or StackPorts.from_env()
        self.topology = topology or Topology.load(self.layout.run)
        self.ports.check(self.topology.kafka_nodes, self.topology.connect_workers, self.topology.redis_replicas, self.topology.sentinels)
        self.tools = prereqs.toolchain() if locate_tools else None
        tools = self.tools
        java = tools.java if tools else None
        self.postgres = LocalPostgres(self.layout, tools.pg_bin if tools else _optional(prereqs.find_pg_bin), self.ports.postgres)
        self.redis_group = LocalRedisGroup(self.layout, tools.redis_server if tools else None, self.ports, self.topology)
        self.redis = self.redis_group.nodes[0]
        self.kafka_nodes = kafka_nodes(self.layout, java, self.ports, self.topology)
        self.connect_workers = connect_workers(self.layout, java, self.ports, self.topology, self.kafka_nodes)
        self.kafka = self.kafka_nodes[0]
        self.connect = self.connect_workers[0]

    @property
    def kafka_bootstrap(self) -> str:
        return bootstrap(self.kafka_nodes)

    # -- settings that point at this stack ---------------------------------------------------------
    def secrets(self) -> dict[str, str]:
        return read_secrets(self.layout.secrets_file)

    def app_database_url(self) -> str:
        password = self.secrets().get("POSTBOX_APP_PASSWORD", "")
        return database_url(user="postbox_app", password=password, port=self.ports.postgres, dbname=DATABASE)

    def maint_database_url(self) -> str:
        password = self.secrets().get("POSTBOX_MAINT_PASSWORD", "")
        return database_url(user="postbox_maint", password=password, port=self.ports.postgres, dbname=DATABASE)

    def env(self) -> dict[str, str]:
        return {
            "POSTBOX_DATABASE_URL": self.app_database_url(),
            # `postbox db retention` / `db status` / `db republish` (the cron line) and `trace`.
            "POSTBOX_MAINT_DATABASE_URL": self.maint_database_url(),
            "POSTBOX_KAFKA_BOOTSTRAP": self.kafka_bootstrap,
            "POSTBOX_REDIS_URL": self.redis_group.consumer_url(),
            "POSTBOX_CONNECT_URL": self.connect.url,
            # The consumer's ACL user may not read CONFIG: a consumer run outside this checkout
            # learns the server's fsync policy from here (postbox.effects.durability).
            "POSTBOX_REDIS_APPENDFSYNC": self.redis.appendfsync(),
            # The superuser (private socket, this machine only), for `postbox db init` and the
            # application's own DDL: the app role may only insert (docker compose prints its own).
            "POSTBOX_ADMIN_DATABASE_URL": self.postgres.admin_url(),
        }

    def cdc_env(self) -> dict[str, str]:
        """The environment through which Connect resolves ${env:POSTBOX_CDC_*} in connector configs."""
        return {
            "POSTBOX_CDC_DB_HOST": "127.0.0.1",
            "POSTBOX_CDC_DB_PORT": str(self.ports.postgres),
            "POSTBOX_CDC_DB_NAME": DATABASE,
            "POSTBOX_CDC_DB_USER": "postbox_cdc",
            "POSTBOX_CDC_DB_PASSWORD": self.secrets()["POSTBOX_CDC_PASSWORD"],
        }

    # -- up ---------------------------------------------------------------------------------------------
    def up(self, progress: Say, wait_timeout: float = 180.0) -> UpReport:
        """Bring everything up; concurrent callers (two terminals, parallel test runs) take turns."""
        self.layout.ensure()
        with _exclusive(self.layout.run / "up.lock", progress):
            self._check_topology_change()
            self.topology.save(self.layout.run)
            return self._up(progress, wait_timeout)

    def _check_topology_change(self) -> None:
        """Refuse to start a topology beside the processes of another one still running here."""
        recorded = Topology.load(self.layout.run)
        if recorded == self.topology:
            return
        old = LocalStack(self.layout, self.ports, locate_tools=False, topology=recorded)
        watched = [*old.kafka_nodes, *old.connect_workers]
        if recorded.redis_replicas != self.topology.redis_replicas:
            watched += old.redis_group.processes
        running = [p.name for p in watched if p.running()]
        if running:
            raise StackError(
                f"the stack in {self.layout.root} runs {recorded.describe()} ({', '.join(running)} up); "
                f"asked for {self.topology.kafka_nodes} Kafka node(s), {self.topology.connect_workers} Connect worker(s) "
                f"and {self.topology.redis_replicas} Redis replica(s)",
                fix="stop it first with `postbox down` (its data is kept), then `postbox up` with the new counts",
            )

    def _start_kafka(self, report: UpReport, progress: Say) -> None:
        for node in self.kafka_nodes:
            outcome = node.start()
            report.steps.append(Step(node.name, outcome, outcome == "started"))
        if len(self.kafka_nodes) > 1:
            progress(f"kafka: {self.topology.describe()}")

    def _start_connect(self, report: UpReport, progress: Say, wait_timeout: float) -> None:
        for node in self.kafka_nodes:
            node.wait_ready(wait_timeout, on_wait=_ticker(progress, f"{node.name}: waiting for the broker"))
        for worker in self.connect_workers:
            outcome = worker.start(self.cdc_env())
            report.steps.append(Step(worker.name, outcome, outcome == "started"))
        for worker in self.connect_workers:
            worker.wait_ready(wait_timeout, on_wait=_ticker(progress, f"{worker.name}: waiting for the REST API"))

    def _start_redis(self, report: UpReport, progress: Say) -> None:
        for name, outcome in self.redis_group.start():
            report.steps.append(Step(name, outcome, outcome == "started"))
        if self.redis_group.replicated:
            progress(f"redis: primary {self.redis_group.primary().name} with {self.topology.redis_replicas} replica(s), "
                     f"{self.topology.sentinels} Sentinels")

    def _up(self, progress: Say, wait_timeout: float) -> UpReport:
        report = UpReport()
        started = time.monotonic()
        assert self.tools is not None
        self.layout.ensure()
        secrets = ensure_secrets(self.layout.secrets_file)

        for jar_set in jars.jar_sets(self.layout):
            if not jar_set.up_to_date():
                progress(f"jars: resolving {jar_set.name} with Maven (the first run downloads from Maven Central)…")
            resolved = jars.resolve(jar_set, self.tools.mvn, self.layout.log("maven"))
            report.steps.append(Step(f"jars/{jar_set.name}", "resolved" if resolved else "up to date", resolved))

        # Configuration first (cheap, and Kafka's storage format needs it), then the servers.
        components: list[Any] = [self.postgres, *self.redis_group.nodes, *self.kafka_nodes, *self.connect_workers]
        restart_needed = [component.name for component in init_all(components) if component.running()]
        if restart_needed:
            progress(f"configuration changed for {', '.join(restart_needed)}: restart with `postbox down && postbox up` to apply")

        self._start_kafka(report, progress)
        progress(f"postgres: {'starting' if not self.postgres.running() else 'running'}…")
        pg_outcome = self.postgres.start()
        report.steps.append(Step("postgres", pg_outcome, pg_outcome == "started"))
        self._start_redis(report, progress)

        created = self.postgres.ensure_database()
        changes = self._init_schema(secrets)
        changes = [line for line in changes if not line.startswith("nothing to change")]
        report.steps.append(Step("database", "; ".join(changes) if (created or changes) else "up to date", bool(created or changes)))

        self._start_connect(report, progress, wait_timeout)

        connector = connector_with_topics(render_connector(ConnectorFile.load(CONNECTOR_TEMPLATE), DEFAULT), TopicsConfig.load())
        # A Connect worker that just started answers its first connector PUT only once it has
        # made its internal topics and joined its group: under load that took longer than the
        # client's 10 s default (ReadTimeout, `postbox up` failed). Bring-up waits as long as
        # it waits for everything else.
        with ConnectClient(self.connect.url, timeout=max(10.0, wait_timeout)) as client:
            applied = client.apply(connector)
            report.steps.append(Step(f"connector/{connector.name}", applied, applied != "unchanged"))
            client.wait_running(
                connector.name,
                wait_timeout,
                on_wait=_ticker(progress, f"connector {connector.name}: waiting for RUNNING", with_state=True),
                log_hint=f" (log: {self.connect.log_path})",
            )
        report.seconds = time.monotonic() - started
        return report

    def _init_schema(self, secrets: dict[str, str]) -> list[str]:
        from postbox.db import init_database

        return init_database(
            self.postgres.admin_url(),
            app_password=secrets["POSTBOX_APP_PASSWORD"],
            cdc_password=secrets["POSTBOX_CDC_PASSWORD"],
            maint_password=secrets.get("POSTBOX_MAINT_PASSWORD"),
        )

    # -- down -------------------------------------------------------------------------------------------
    def down(self, progress: Say) -> list[Step]:
        """Stop in reverse dependency order, so Connect flushes its offsets to a live broker."""
        steps = []
        for component in [*self.connect_workers, *self.kafka_nodes]:
            progress(f"{component.name}: stopping…")
            stopped = component.stop()
            steps.append(Step(component.name, "stopped" if stopped else "was not running", stopped))
        progress("redis: stopping…")
        steps += [Step(name, "stopped" if stopped else "was not running", stopped) for name, stopped in self.redis_group.stop()]
        progress(f"{self.postgres.name}: stopping…")
        stopped = self.postgres.stop()
        steps.append(Step(self.postgres.name, "stopped" if stopped else "was not running", stopped))
        return steps

    # -- status -----------------------------------------------------------------------------------------
    def status(self, pipeline: Pipeline = DEFAULT) -> dict[str, Any]:
        """Each component's state, and ``pipeline``'s connector, first task and replication slot."""
        components: dict[str, Any] = {}
        components["postgres"] = {k: v for k, v in process_status(self.postgres).items() if k != "name"}
        components["redis"] = group_status(self.redis_group.processes, self.redis.address)
        redis = self.redis_group.status() if self.redis_group.replicated else {"nodes": [process_status(self.redis)], "sentinels": []}
        components["kafka"] = group_status(self.kafka_nodes, self.kafka_bootstrap)
        components["connect"] = group_status(self.connect_workers, self.connect.address)
        connector: dict[str, Any] = {"name": pipeline.connector, "state": "unknown"}
        task: dict[str, Any] = {"state": "unknown"}
        answering = next((w for w in self.connect_workers if w.running()), None)  # any worker's REST API reports the group's
        if answering is not None:
            connector, task = _connector_and_task(connector_status(answering.url, pipeline.connector, timeout=3))
        running = components["postgres"]["state"] == "running"
        slot = slot_status(self.app_database_url(), pipeline.slot) if running else {"state": "unknown"}
        return {
            "state_dir": str(self.layout.root),
            "postgres": components["postgres"],
            "redis": components["redis"],
            "kafka": components["kafka"],
            "connect": components["connect"],
            "topology": {"kafka_nodes": self.topology.kafka_nodes, "connect_workers": self.topology.connect_workers,
                         "replication_factor": self.topology.replication_factor,
                         "min_insync_replicas": self.topology.min_insync_replicas,
                         "redis_replicas": self.topology.redis_replicas, "sentinels": self.topology.sentinels},
            "kafka_nodes": [process_status(node) for node in self.kafka_nodes],
            "connect_workers": [process_status(worker) for worker in self.connect_workers],
            "redis_nodes": redis["nodes"],
            "sentinels": redis["sentinels"],
            "connector": connector,
            "task": task,
            "slot": slot,
        }


@contextmanager
def _exclusive(lock_path: Path, progress: Say) -> Iterator[None]:
    """An advisory lock so that two `postbox up` never start two brokers or two workers."""
    with open(lock_path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress("another `postbox up` is running here; waiting for it to finish…")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def healthy(status: dict[str, Any]) -> bool:
    """Every process running, the connector RUNNING and the slot's WAL kept: `postbox status`
    (text and ``--json`` alike) exits 1 otherwise, so either form can gate a script."""
    from postbox.slot import LOSS_STATES

    running = all(status[n]["state"] == "running" for n in ("postgres", "redis", "kafka", "connect"))
    return running and status["connector"]["state"] == "RUNNING" and status["slot"].get("wal_status") not in LOSS_STATES


def _connector_and_task(report: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """`postbox status`'s two lines from the connector report: the connector, and its first task."""
    connector = {k: v for k, v in report.items() if k != "tasks"}
    if report["state"] in ("not registered", "unreachable"):
        return connector, {"state": "none" if report["state"] == "not registered" else "unknown"}
    tasks = report["tasks"]
    task: dict[str, Any] = {"state": tasks[0]["state"] if tasks else "none",
                            "tasks": [{k: t[k] for k in ("id", "state", "worker")} for t in tasks]}
    failed = [t["error"] for t in tasks if t["state"] == "FAILED" and t.get("error")]
    if failed:
        task["error"] = failed[0]
    return connector, task


def _optional(fn: Callable[[], Path]) -> Path | None:
    try:
        return fn()
    except StackError:
        return None


def _ticker(progress: Say, label: str, with_state: bool = False):
    """Progress every ~2 s during a wait, with the elapsed time (and the connector's state)."""
    last = [-2.0]

    def tick(elapsed: float, state: Any = None) -> None:
        if elapsed - last[0] >= 2.0:
            last[0] = elapsed
            suffix = ""
            if with_state:
                suffix = f" (now: {state.describe() if state else 'registering'})"
            progress(f"{label}… {elapsed:.0f}s{suffix}")

    return tick


def admin_redis_url() -> str:
    """Redis as its ``default`` (admin) user: POSTBOX_ADMIN_REDIS_URL, else the local stack's.

    For administration only (tests, benchmarks); consumers and the CLI use POSTBOX_REDIS_URL.
    """

    return env_value("POSTBOX_ADMIN_REDIS_URL") or LocalStack(locate_tools=False).redis_group.admin_url()


def admin_database_url() -> str:
    """A superuser/owner URL: POSTBOX_ADMIN_DATABASE_URL, else the local stack's private socket.

    For administration only (db init, tests, benchmarks); applications use POSTBOX_DATABASE_URL.
    """
    import os

    return os.environ.get("POSTBOX_ADMIN_DATABASE_URL") or LocalStack(locate_tools=False).postgres.admin_url()
