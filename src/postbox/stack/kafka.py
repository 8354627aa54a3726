"""One Kafka node of the local stack (broker + KRaft controller) from the Maven-resolved jars.

The plain stack is one such node, formatted as a standalone quorum. A stack of several nodes
(:mod:`postbox.stack.kafka_nodes`) gives each the static list of every voter and one shared
cluster id; each node keeps its own data folder, config, pid file and log.
"""

from __future__ import annotations

import base64
import subprocess
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from postbox.errors import StackError
from postbox.stack.jvm import java_command
from postbox.stack.layout import StackLayout
from postbox.stack.processes import StackProcess, ManagedProcess, port_open, port_owner, wait_until
from postbox.stack.templates import render, write_if_changed


#: The ids Kafka's ``Uuid`` reserves (``ZERO_UUID``, ``METADATA_TOPIC_ID``): never a cluster's.
_RESERVED_IDS = frozenset({bytes(16), bytes(15) + b"\x01"})


def new_cluster_id(draw: Callable[[], bytes] = lambda: uuid.uuid4().bytes) -> str:
    """A KRaft cluster id made as Kafka's ``Uuid.randomUuid()`` makes one: 16 random bytes as
    unpadded URL-safe base64, drawn again while the text starts with ``-`` (the storage tool, as
    every command line, would take it for a flag: one draw in 64) or is a reserved id."""
    while True:
        raw = draw()
        text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        if not text.startswith("-") and raw not in _RESERVED_IDS:
            return text


@dataclass(frozen=True)
class NodeSpec:
    """Who a node is in its cluster: its id, and the cluster's size, voters and replication."""

    node_id: int = 1
    #: ``id@host:port`` of every controller; empty for the standalone single node.
    voters: tuple[str, ...] = ()
    replication_factor: int = 1
    min_insync_replicas: int = 1

    @property
    def standalone(self) -> bool:
        return not self.voters

    def suffix(self) -> str:
        """The file-name suffix of this node: none for the standalone node (its files as always)."""
        return "" if self.standalone else f"-{self.node_id}"


class LocalKafka(StackProcess):
    name = "kafka"

    def __init__(self, layout: StackLayout, java: Path | None, port: int, controller_port: int,
                 spec: NodeSpec | None = None, cluster_id: Callable[[], str] = lambda: new_cluster_id()) -> None:
        self.layout = layout
        self.java = java
        self.port = port
        self.controller_port = controller_port
        self.spec = spec or NodeSpec()
        self.name = f"kafka{self.spec.suffix()}"
        self._cluster_id = cluster_id
        self.process = ManagedProcess(self.name, layout.pidfile(self.name), layout.log(self.name), marker=str(self.config_path))

    @property
    def node_id(self) -> int:
        return self.spec.node_id

    @property
    def config_path(self) -> Path:
        return self.layout.run / f"{self.name}.properties"

    @property
    def data_dir(self) -> Path:
        return self.layout.kafka_data if self.spec.standalone else self.layout.kafka_node_data(len(self.spec.voters), self.node_id)

    @property
    def classpath(self) -> str:
        return f"{self.layout.kafka_lib}/*"

    def render(self) -> str:
        """This node's server.properties (infra/local/kafka.properties filled in)."""
        spec = self.spec
        quorum = (f"controller.quorum.bootstrap.servers=127.0.0.1:{self.controller_port}" if spec.standalone
                  else f"controller.quorum.voters={','.join(spec.voters)}")
        return render("kafka.properties", {
            "kafka_port": self.port, "controller_port": self.controller_port, "data_dir": self.data_dir,
            "node_id": spec.node_id, "quorum": quorum,
            "replication_factor": spec.replication_factor, "min_isr": spec.min_insync_replicas,
        })

    def init(self) -> bool:
        changed = write_if_changed(self.config_path, self.render())
        if not (self.data_dir / "meta.properties").is_file():
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self._format(self._cluster_id())
            changed = True
        return changed

    def _format(self, cluster_id: str) -> None:
        """Format the node's storage: a standalone quorum of one, or a member of the static voters."""
        assert self.java is not None
        argv = java_command(
            self.java, "POSTBOX_KAFKA_TOOL_HEAP", "256m", self.classpath, "kafka.tools.StorageTool",
            "format", "-t", cluster_id, "-c", str(self.config_path), *(("--standalone",) if self.spec.standalone else ()),
        )
        result = subprocess.run(argv, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        if result.returncode != 0:
            raise StackError(f"formatting the KRaft storage of {self.name} ({self.data_dir}) failed: "
                             f"{(result.stderr or result.stdout).strip()[-400:]}")

    def start(self) -> str:
        if self.running():
            return "already running"
        for port in (self.port, self.controller_port):
            if port_open("127.0.0.1", port):
                raise StackError(
                    f"port {port} ({self.name}) is taken by {port_owner(port) or 'another process'}",
                    fix="stop it or set POSTBOX_KAFKA_PORT / POSTBOX_KAFKA_CONTROLLER_PORT to free ports",
                )
        assert self.java is not None
        # Several nodes share the machine: each gets a smaller heap (POSTBOX_KAFKA_HEAP sets every node's).
        heap = "768m" if self.spec.standalone else "512m"
        argv = java_command(self.java, "POSTBOX_KAFKA_HEAP", heap, self.classpath, "kafka.Kafka", str(self.config_path))
        self.process.start(argv)
        return "started"

    def ready(self) -> bool:
        """True once the broker answers a metadata request."""
        if not self.process.running():
            raise StackError(f"the Kafka broker {self.name} exited during start{self.process.exit_reason()}")
        if not port_open("127.0.0.1", self.port):
            return False
        from confluent_kafka.admin import AdminClient

        try:
            admin = AdminClient({"bootstrap.servers": self.address, "log_level": 0, "logger": _quiet_logger()})
            metadata = admin.list_topics(timeout=2)
            return bool(metadata.brokers)
        except Exception:
            return False

    def wait_ready(self, timeout: float, on_wait=None) -> None:
        if not wait_until(self.ready, timeout, interval=0.5, on_wait=on_wait):
            raise StackError(f"Kafka ({self.name}) did not become ready within {timeout:.0f} s (log: {self.log_path})")

    def stop(self) -> bool:
        return self.process.stop(timeout=60)


def _quiet_logger():
    import logging

    logger = logging.getLogger("postbox.stack.kafka.librdkafka")
    logger.addHandler(logging.NullHandler())
    logger.propagate = False
    return logger
