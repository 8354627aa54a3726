"""Kafka of the local stack: one KRaft node (broker + controller) from the Maven-resolved jars."""

from __future__ import annotations

import base64
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

from postbox.errors import StackError
from postbox.stack.jvm import java_command
from postbox.stack.layout import StackLayout
from postbox.stack.processes import ManagedProcess, port_open, port_owner, wait_until
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


class LocalKafka:
    name = "kafka"

    def __init__(self, layout: StackLayout, java: Path | None, port: int, controller_port: int) -> None:
        self.layout = layout
        self.java = java
        self.port = port
        self.controller_port = controller_port
        self.process = ManagedProcess("kafka", layout.pidfile("kafka"), layout.log("kafka"), marker=str(self.config_path))

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.layout.log("kafka")

    @property
    def config_path(self) -> Path:
        return self.layout.run / "kafka.properties"

    @property
    def classpath(self) -> str:
        return f"{self.layout.kafka_lib}/*"

    def running(self) -> bool:
        return self.process.running()

    def pid(self) -> int | None:
        return self.process.pid()

    def init(self) -> bool:
        conf = render("kafka.properties", {"kafka_port": self.port, "controller_port": self.controller_port, "data_dir": self.layout.kafka_data})
        changed = write_if_changed(self.config_path, conf)
        if not (self.layout.kafka_data / "meta.properties").is_file():
            self._format()
            changed = True
        return changed

    def _format(self) -> None:
        assert self.java is not None
        cluster_id = new_cluster_id()
        argv = java_command(
            self.java, "POSTBOX_KAFKA_TOOL_HEAP", "256m", self.classpath, "kafka.tools.StorageTool",
            "format", "-t", cluster_id, "-c", str(self.config_path), "--standalone",
        )
        result = subprocess.run(argv, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        if result.returncode != 0:
            raise StackError(f"formatting Kafka's KRaft storage failed: {(result.stderr or result.stdout).strip()[-400:]}")

    def start(self) -> str:
        if self.running():
            return "already running"
        for port in (self.port, self.controller_port):
            if port_open("127.0.0.1", port):
                raise StackError(
                    f"port {port} (Kafka) is taken by {port_owner(port) or 'another process'}",
                    fix="stop it or set POSTBOX_KAFKA_PORT / POSTBOX_KAFKA_CONTROLLER_PORT to free ports",
                )
        assert self.java is not None
        argv = java_command(self.java, "POSTBOX_KAFKA_HEAP", "768m", self.classpath, "kafka.Kafka", str(self.config_path))
        self.process.start(argv)
        return "started"

    def ready(self) -> bool:
        """True once the broker answers a metadata request."""
        if not self.process.running():
            raise StackError(f"the Kafka broker exited during start (log: {self.log_path})")
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
            raise StackError(f"Kafka did not become ready within {timeout:.0f} s (log: {self.log_path})")

    def stop(self) -> bool:
        return self.process.stop(timeout=60)

    def kill(self) -> bool:
        return self.process.kill()


def _quiet_logger():
    import logging

    logger = logging.getLogger("postbox.stack.kafka.librdkafka")
    logger.addHandler(logging.NullHandler())
    logger.propagate = False
    return logger
