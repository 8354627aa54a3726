"""Where the local stack keeps its state: one folder (default `.postbox/` in the project).

Everything the stack writes lives below it (data, logs, pid files, generated configs, secrets,
resolved jars), so `rm -rf .postbox` is a full reset and nothing leaks into the checkout.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from postbox.stack.checkout import checkout_root


def default_state_dir() -> Path:
    """``POSTBOX_STATE_DIR`` when set, else `.postbox/` in the project folder."""
    env = os.environ.get("POSTBOX_STATE_DIR")
    if env:
        return Path(env).expanduser().resolve()
    return checkout_root() / ".postbox"


@dataclass(frozen=True)
class StackLayout:
    """Paths of every file and folder of one local stack."""

    root: Path

    @classmethod
    def default(cls) -> "StackLayout":
        return cls(default_state_dir())

    # -- shared -------------------------------------------------------------------------------
    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def run(self) -> Path:
        """Pid files and generated configuration."""
        return self.root / "run"

    @property
    def secrets_file(self) -> Path:
        return self.root / "secrets.env"

    @property
    def lib(self) -> Path:
        return self.root / "lib"

    @property
    def kafka_lib(self) -> Path:
        """Class path of the broker and the Connect worker."""
        return self.lib / "kafka"

    @property
    def plugins(self) -> Path:
        """Connect's plugin.path: one sub-folder per plugin, never on the worker class path."""
        return self.lib / "plugins"

    @property
    def debezium_plugin(self) -> Path:
        return self.plugins / "debezium-postgres"

    # -- PostgreSQL (owned by the postgres OS user when we run as root) ---------------------------
    @property
    def pg_link(self) -> Path:
        """`.postbox/postgres`: the folder itself, or a link to it when it had to live elsewhere."""
        return self.root / "postgres"

    @property
    def pg_home(self) -> Path:
        """The real PostgreSQL folder (link resolved: the server must see a path it can traverse)."""
        link = self.pg_link
        return link.resolve() if link.is_symlink() else link

    @property
    def pg_data(self) -> Path:
        return self.pg_home / "data"

    @property
    def pg_socket_dir(self) -> Path:
        return self.pg_home / "run"

    @property
    def pg_log(self) -> Path:
        return self.pg_home / "postgres.log"

    # -- Redis ------------------------------------------------------------------------------------
    @property
    def redis_dir(self) -> Path:
        return self.root / "redis"

    # -- Kafka / Connect ---------------------------------------------------------------------------
    @property
    def kafka_data(self) -> Path:
        return self.root / "kafka" / "data"

    def kafka_node_data(self, nodes: int, node: int) -> Path:
        """Node ``node`` of a cluster of ``nodes``: each cluster size its own data (a 1-node
        stack's storage, formatted as a standalone quorum, never joins a 3-node one)."""
        return self.root / "kafka" / f"cluster-{nodes}" / f"node-{node}"

    @property
    def connect_dir(self) -> Path:
        return self.root / "connect"

    def log(self, component: str) -> Path:
        return self.logs / f"{component}.log"

    def pidfile(self, component: str) -> Path:
        return self.run / f"{component}.pid"

    def ensure(self) -> None:
        for folder in (self.root, self.logs, self.run, self.lib, self.redis_dir, self.kafka_data, self.connect_dir):
            folder.mkdir(parents=True, exist_ok=True)
        gitignore = self.root / ".gitignore"
        if not gitignore.exists():
            gitignore.write_text("*\n")
