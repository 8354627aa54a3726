"""A private Kafka cluster and Connect group for the fault suite, started by the stack's own code.

Why: a broker or worker failover can only be rehearsed on several nodes, and the shared stack
must not be touched. This builds a :class:`~postbox.stack.stack.LocalStack` in its own state
folder (``root``), on free ports, in the topology asked for (``postbox up --kafka-nodes N
--connect-workers M`` as a user would run it), and starts only its Kafka nodes and Connect
workers; the jars are the shared stack's (its ``lib`` folder linked in), PostgreSQL is the shared
stack's. The connector it registers is the default pipeline's with its own name, replication
slot and ``topic.prefix`` (the publication is the pipeline's, whose table list is the same), so
the shared connector's offsets and slot are never touched; :meth:`close` stops every process it
started and drops its slot.
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import psycopg
from confluent_kafka.admin import AdminClient

from postbox.connect_client import ConnectClient, ConnectorFile
from postbox.connector import render_connector
from postbox.errors import StackError
from postbox.pipelines import DEFAULT
from postbox.resources import CONNECTOR_TEMPLATE
from postbox.stack.connect import LocalConnect
from postbox.stack.kafka import LocalKafka
from postbox.stack.layout import StackLayout
from postbox.stack.nodes import init_all
from postbox.stack.ports import NODE_PORT_STEP, StackPorts
from postbox.stack.processes import pid_alive, port_open
from postbox.stack.stack import LocalStack, admin_database_url
from postbox.stack.topology import Topology
from tests.support.ports import port_free
from postbox.topic_creation import TopicsConfig, connector_with_topics


_BIND_FAILURE = re.compile(r"Address already in use|BindException|Failed to bind")


def free_ports(topology: Topology, shared: StackPorts) -> StackPorts:
    """Ports for a private topology: every node's and worker's derived port free, none of the shared stack's."""
    import random

    for _ in range(500):
        kafka = random.randrange(20000, 30000, 2)  # below the ephemeral range (32768-): no outgoing connection takes them
        connect = random.randrange(30000, 32000)
        ports = StackPorts(postgres=shared.postgres, redis=shared.redis, kafka=kafka, controller=kafka + 1, connect=connect)
        wanted = [p for n in range(1, topology.kafka_nodes + 1) for p in ports.kafka_node(n)]
        wanted += [ports.connect_worker(w) for w in range(1, topology.connect_workers + 1)]
        if all(port_free(p) for p in wanted):
            return ports
    raise RuntimeError(f"no free ports for {topology.describe()} (nodes {NODE_PORT_STEP} ports apart)")


class PrivateCluster:
    """``topology``'s Kafka nodes and Connect workers under ``root``, with one outbox connector."""

    def __init__(self, root: Path, topology: Topology, *, log: Callable[[str], None] = print) -> None:
        self.log = log
        self.shared = LocalStack(locate_tools=False)
        self.root = root
        self.stack = self._stack_in(root, topology)
        token = uuid.uuid4().hex[:8]
        self.connector_name = f"postbox-faults-{token}"
        self.slot = f"postbox_faults_{token}"
        self.topic_prefix = f"postbox_faults_{token}"
        self._started = False
        self._admin: AdminClient | None = None

    def _stack_in(self, root: Path, topology: Topology) -> LocalStack:
        root.mkdir(parents=True, exist_ok=True)
        (root / "lib").symlink_to(self.shared.layout.lib, target_is_directory=True)
        return LocalStack(StackLayout(root), free_ports(topology, self.shared.ports), topology=topology)

    # -- addresses ------------------------------------------------------------------------------
    @property
    def nodes(self) -> list[LocalKafka]:
        return self.stack.kafka_nodes

    @property
    def workers(self) -> list[LocalConnect]:
        return self.stack.connect_workers

    @property
    def bootstrap(self) -> str:
        return self.stack.kafka_bootstrap

    def connect_url(self) -> str:
        """The REST API of a worker that runs (any worker answers for the group)."""
        return next(w for w in self.workers if w.running()).url

    def node(self, node_id: int) -> LocalKafka:
        [found] = [n for n in self.nodes if n.node_id == node_id]
        return found

    def worker_at(self, worker_id: str) -> LocalConnect:
        """The worker Connect names ``127.0.0.1:<port>``."""
        [found] = [w for w in self.workers if w.address == worker_id]
        return found

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self, timeout: float = 240) -> "PrivateCluster":
        """Start the nodes, then the workers (the path `postbox up` takes), then the connector.

        A port that was free when chosen can be taken before the node binds it (another test's
        process, an outgoing connection): that start is retried once on other ports, in a new folder.
        """
        try:
            return self._start(timeout)
        except StackError as exc:
            if not _BIND_FAILURE.search(str(exc)):
                raise
            self.log(f"   a port was taken before its node bound it, starting again on other ports: {exc}")
            self.stack = self._stack_in(self.root / "second-start", self.stack.topology)
            return self._start(timeout)

    def _start(self, timeout: float) -> "PrivateCluster":
        started = time.monotonic()
        self._started = True
        try:
            self.stack.layout.ensure()
            init_all([*self.nodes, *self.workers])
            for node in self.nodes:
                node.start()
            for node in self.nodes:
                node.wait_ready(timeout)
            cdc = self.shared.cdc_env()
            for worker in self.workers:
                worker.start(cdc)
            for worker in self.workers:
                worker.wait_ready(timeout)
            self._register(timeout)
        except BaseException:
            self.close()
            raise
        self.log(f"   private cluster up in {time.monotonic() - started:.0f} s: {self.stack.topology.describe()}; "
                 f"brokers {self.bootstrap}; workers {', '.join(w.address for w in self.workers)}")
        return self

    def connector(self) -> ConnectorFile:
        base = connector_with_topics(render_connector(ConnectorFile.load(CONNECTOR_TEMPLATE), DEFAULT), TopicsConfig.load())
        return replace(base, name=self.connector_name,
                       config={**base.config, "slot.name": self.slot, "topic.prefix": self.topic_prefix,
                               # the change events' topic before the router reroutes them follows the prefix
                               "predicates.isOutboxTable.pattern": rf"{re.escape(self.topic_prefix)}\.postbox\.outbox"})

    def _register(self, timeout: float) -> None:
        connector = self.connector()
        with ConnectClient(self.connect_url(), timeout=max(10.0, timeout)) as client:
            client.apply(connector)
            client.wait_running(connector.name, timeout)

    def task_worker(self) -> str | None:
        """``127.0.0.1:<port>`` of the worker running the connector's task (None while unassigned)."""
        with ConnectClient(self.connect_url(), timeout=5) as client:
            state = client.status(self.connector_name)
        if state is None or not state.tasks:
            return None
        task = state.tasks[0]
        return str(task["worker_id"]) if task.get("state") == "RUNNING" else None

    # -- Kafka's view -----------------------------------------------------------------------------
    def admin(self) -> AdminClient:
        if self._admin is None:  # kept: a dropped client cancels its pending requests (describe_consumer_groups)
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        return self._admin

    def leader(self, topic: str, partition: int) -> int:
        meta = self.admin().list_topics(topic, timeout=10).topics[topic]
        return int(meta.partitions[partition].leader)

    def partition_state(self, topic: str) -> dict[int, dict[str, Any]]:
        meta = self.admin().list_topics(topic, timeout=10).topics[topic]
        return {p: {"leader": m.leader, "replicas": list(m.replicas), "isrs": list(m.isrs)} for p, m in meta.partitions.items()}

    def coordinator(self, group: str) -> int:
        """The node id of ``group``'s coordinator."""
        deadline = time.monotonic() + 90
        while True:  # right after a node's restart the first lookups may time out
            try:
                # A client of its own per lookup, alive until its answer: librdkafka aborts the process
                # when a long-lived client gets a DescribeGroups answer after its request timed out
                # across a broker's restart (an open librdkafka bug; it aborted this suite once).
                admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
                future = admin.describe_consumer_groups([group], request_timeout=10)[group]
                return int(future.result(timeout=15).coordinator.id)
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)

    def wait_in_sync(self, topic: str, timeout: float = 120) -> None:
        """Every partition of ``topic`` back to its full in-sync replica set (a restarted node caught up)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                state = self.partition_state(topic)
                if all(len(s["isrs"]) == len(s["replicas"]) for s in state.values()):
                    return
            except Exception:
                pass
            time.sleep(0.5)
        raise AssertionError(f"{topic} not fully in sync after {timeout:.0f} s: {self.partition_state(topic)}")

    def restart(self, process: LocalKafka | LocalConnect, timeout: float = 180) -> float:
        """Start a killed node or worker again (once its ports are free); seconds until it answers."""
        pid_free = time.monotonic() + 30
        ports = [process.port] + ([process.controller_port] if isinstance(process, LocalKafka) else [])
        while any(port_open("127.0.0.1", p) for p in ports) and time.monotonic() < pid_free:
            time.sleep(0.1)
        t0 = time.monotonic()
        if isinstance(process, LocalKafka):
            process.start()
        else:
            process.start(self.shared.cdc_env())
        process.wait_ready(timeout)
        return time.monotonic() - t0

    def close(self) -> None:
        """Stop the workers (the connector's slot is released), the nodes, and drop the slot."""
        if not self._started:
            return
        self._started = False
        for process in (*self.workers, *self.nodes):
            try:
                process.stop()
            except Exception as exc:  # keep stopping the others
                self.log(f"   stopping {process.name}: {exc}")
        for process in (*self.workers, *self.nodes):
            pid = process.pid()
            if pid is not None and pid_alive(pid):
                process.kill()
        self.drop_slot()

    def drop_slot(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        with psycopg.connect(admin_database_url(), autocommit=True) as conn:
            while True:
                row = conn.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (self.slot,)).fetchone()
                if row is None:
                    return
                if not row[0]:
                    conn.execute("SELECT pg_drop_replication_slot(%s)", (self.slot,))
                    return
                if time.monotonic() > deadline:
                    raise AssertionError(f"replication slot {self.slot} still active {timeout:.0f} s after its workers stopped")
                time.sleep(0.5)
