"""A Sentinel of the local stack's replicated Redis: one ``redis-server --sentinel`` process.

Why ``redis-server --sentinel`` and not Debian's ``redis-sentinel``: it is the same program (the
Sentinel mode is built into every redis-server), so the stack needs no second package. Its
configuration is written once from ``infra/local/sentinel.conf``; from then on the file is the
Sentinel's own (it records the current primary there), so a restarted Sentinel resumes what it knew.
"""

from __future__ import annotations

import os
from pathlib import Path

from postbox.errors import StackError
from postbox.stack.addresses import SENTINEL_SERVICE
from postbox.stack.layout import StackLayout
from postbox.stack.processes import StackProcess, ManagedProcess, port_open, port_owner, wait_until
from postbox.stack.secrets import read_secrets
from postbox.stack.templates import render

SERVICE = SENTINEL_SERVICE


class LocalSentinel(StackProcess):
    """Sentinel ``index`` (1-based) on ``port``, watching :data:`SERVICE` with a majority ``quorum``."""

    def __init__(self, layout: StackLayout, redis_server: Path | None, port: int, *, index: int, quorum: int) -> None:
        self.layout = layout
        self.redis_server = redis_server
        self.port = port
        self.quorum = quorum
        self.name = f"sentinel-{index}"
        self.process = ManagedProcess(self.name, layout.pidfile(self.name), layout.log(self.name), marker="redis-server")

    @property
    def config_path(self) -> Path:
        return self.layout.run / f"{self.name}.conf"

    @property
    def data_dir(self) -> Path:
        return self.layout.root / self.name

    def init(self, primary_port: int | None = None) -> bool:
        """Write the configuration once (it then belongs to the Sentinel); True when written."""
        if self.config_path.is_file():
            return False
        if primary_port is None:
            raise StackError(f"{self.name}: no configuration yet and no primary to watch")
        admin = read_secrets(self.layout.secrets_file).get("POSTBOX_REDIS_ADMIN_PASSWORD", "")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(render("sentinel.conf", {
            "sentinel_port": self.port, "data_dir": self.data_dir, "service": SERVICE,
            "primary_port": primary_port, "quorum": self.quorum, "admin_password": admin,
        }))
        os.chmod(self.config_path, 0o600)
        return True

    def start(self) -> str:
        if self.running():
            return "already running"
        if port_open("127.0.0.1", self.port):
            raise StackError(f"port {self.port} ({self.name}) is taken by {port_owner(self.port) or 'another process'}",
                             fix="stop it or set POSTBOX_SENTINEL_PORT to free ports (the Sentinels take three in a row)")
        self.process.start([str(self.redis_server), str(self.config_path), "--sentinel"], umask=0o077)
        if not wait_until(self.ready, 30):
            raise StackError(f"{self.name} did not answer PING within 30 s (log: {self.log_path})")
        return "started"

    def ready(self) -> bool:
        if not self.process.running():
            raise StackError(f"{self.name} exited during start{self.process.exit_reason()}")
        return self.primary_port(timeout=1) is not None or port_open("127.0.0.1", self.port)

    def primary_port(self, timeout: float = 2) -> int | None:
        """The port of the primary this Sentinel names now (None when it does not answer)."""
        import redis

        try:
            client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=timeout, socket_connect_timeout=timeout)
            try:
                found = client.sentinel_get_master_addr_by_name(SERVICE)
            finally:
                client.close()
        except redis.RedisError:
            return None
        return int(found[1]) if found else None

    def stop(self) -> bool:
        return self.process.stop(timeout=30)
