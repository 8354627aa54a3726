"""The Kafka Connect distributed worker of the local stack, with Debezium on its plugin.path.

The worker's environment carries the Debezium role's connection (POSTBOX_CDC_*), which connector
configs reference as ``${env:POSTBOX_CDC_...}`` through Kafka's EnvVarConfigProvider: the JSON in
`connectors/` holds no secret and works unchanged under docker compose.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from postbox.errors import StackError
from postbox.stack.jvm import java_command
from postbox.stack.layout import StackLayout
from postbox.stack.processes import StackProcess, ManagedProcess, port_open, port_owner, wait_until
from postbox.stack.templates import render, write_if_changed


class LocalConnect(StackProcess):
    """One worker; ``worker`` numbers it among several (None: the plain stack's only worker)."""

    name = "connect"

    def __init__(self, layout: StackLayout, java: Path | None, port: int, kafka_port: int,
                 *, bootstrap: str | None = None, worker: int | None = None, replication_factor: int = 1) -> None:
        self.layout = layout
        self.java = java
        self.port = port
        self.kafka_port = kafka_port
        self.bootstrap = bootstrap or f"127.0.0.1:{kafka_port}"
        self.worker = worker
        self.replication_factor = replication_factor
        self.name = "connect" if worker is None else f"connect-{worker}"
        self.process = ManagedProcess(self.name, layout.pidfile(self.name), layout.log(self.name), marker=str(self.config_path))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.layout.run / f"{self.name}.properties"

    def init(self) -> bool:
        conf = render(
            "connect.properties",
            {"bootstrap": self.bootstrap, "connect_port": self.port, "plugin_path": self.layout.plugins,
             "replication_factor": self.replication_factor},
        )
        return write_if_changed(self.config_path, conf)

    def start(self, cdc_env: Mapping[str, str]) -> str:
        if self.running():
            return "already running"
        if port_open("127.0.0.1", self.port):
            raise StackError(
                f"port {self.port} (Kafka Connect REST of {self.name}) is taken by {port_owner(self.port) or 'another process'}",
                fix="stop it or set POSTBOX_CONNECT_PORT to a free port",
            )
        assert self.java is not None
        heap = "768m" if self.worker is None else "512m"  # several workers share the machine
        argv = java_command(
            self.java, "POSTBOX_CONNECT_HEAP", heap, f"{self.layout.kafka_lib}/*",
            "org.apache.kafka.connect.cli.ConnectDistributed", str(self.config_path),
        )
        env = {**os.environ, **cdc_env}
        self.process.start(argv, env=env)
        return "started"

    def ready(self) -> bool:
        """True once the REST API answers and the worker has joined its group."""
        import httpx

        if not self.process.running():
            raise StackError(f"the Kafka Connect worker {self.name} exited during start{self.process.exit_reason()}")
        try:
            response = httpx.get(f"{self.url}/connectors", timeout=2)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    def wait_ready(self, timeout: float, on_wait=None) -> None:
        if not wait_until(self.ready, timeout, interval=0.5, on_wait=on_wait):
            raise StackError(f"Kafka Connect's REST API ({self.name}) did not come up within {timeout:.0f} s (log: {self.log_path})")

    def stop(self) -> bool:
        return self.process.stop(timeout=60)
