"""Redis of the local stack: AOF on, `appendfsync always` unless POSTBOX_REDIS_APPENDFSYNC says otherwise.

Access control: an aclfile in the run folder (mode 0600, passwords only as SHA-256) with two users,
``default`` (everything; the stack's own checks use it) and ``postbox_consumer`` (the commands and
key patterns of postbox.effects.acl; ``POSTBOX_REDIS_KEY_PATTERNS`` changes the patterns). The
passwords live in the secrets file. ``acl_active`` tells whether the running server was started
with the aclfile (a server started before ACLs existed keeps working without credentials until the
next restart).

A replicated Redis (:mod:`postbox.stack.redis_group`) has several nodes of this class. Each is
started with a file of its own that includes the rendered configuration and says whose replica
it is: the Sentinels rewrite that file when they reconfigure a node, and it is written anew at
each start, so the rendered configuration stays ours and the role stays the Sentinels'.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from postbox.errors import StackError
from postbox.stack.layout import StackLayout
from postbox.stack.processes import StackProcess, ManagedProcess, port_open, port_owner, wait_until
from postbox.stack.secrets import read_secrets
from postbox.stack.templates import render, write_if_changed

APPENDFSYNC_CHOICES = ("always", "everysec", "no")


class LocalRedis(StackProcess):
    """Redis node ``node`` (1: the plain stack's only one, named ``redis``; then ``redis-2`` …)."""

    def __init__(self, layout: StackLayout, redis_server: Path | None, port: int, *, node: int = 1, replicated: bool = False) -> None:
        self.layout = layout
        self.redis_server = redis_server
        self.port = port
        self.node = node
        self.replicated = replicated
        self.name = "redis" if node == 1 else f"redis-{node}"
        # Redis rewrites its process title ("redis-server 127.0.0.1:6379"), so the config path is not
        # visible there; the binary name plus the pid file is what we can check.
        self.process = ManagedProcess(self.name, layout.pidfile(self.name), layout.log(self.name), marker="redis-server")

    @property
    def config_path(self) -> Path:
        return self.layout.run / f"{self.name}.conf"

    @property
    def data_dir(self) -> Path:
        return self.layout.redis_dir if self.node == 1 else self.layout.root / self.name

    @property
    def start_config(self) -> Path:
        """The file redis-server starts with: the rendered one, or a replicated node's own (see above)."""
        return self.layout.run / f"{self.name}.node.conf" if self.replicated else self.config_path

    @property
    def acl_path(self) -> Path:
        return self.layout.run / "redis-users.acl"

    @property
    def acl_marker(self) -> Path:
        """Written when the server is started with the aclfile: clients must then authenticate."""
        return self.layout.run / "redis-acl.active"

    def acl_active(self) -> bool:
        return self.acl_marker.is_file()

    def _passwords(self) -> tuple[str, str]:
        secrets = read_secrets(self.layout.secrets_file)
        return secrets.get("POSTBOX_REDIS_ADMIN_PASSWORD", ""), secrets.get("POSTBOX_REDIS_CONSUMER_PASSWORD", "")

    def admin_url(self) -> str:
        admin, _ = self._passwords()
        return f"redis://default:{admin}@{self.address}/0" if self.acl_active() and admin else f"redis://{self.address}/0"

    def consumer_url(self) -> str:
        from postbox.effects.acl import CONSUMER_USER

        _, consumer = self._passwords()
        return f"redis://{CONSUMER_USER}:{consumer}@{self.address}/0" if self.acl_active() and consumer else f"redis://{self.address}/0"

    def appendfsync(self) -> str:
        value = os.environ.get("POSTBOX_REDIS_APPENDFSYNC", "always")
        if value not in APPENDFSYNC_CHOICES:
            raise StackError(f"POSTBOX_REDIS_APPENDFSYNC={value!r}: expected one of {', '.join(APPENDFSYNC_CHOICES)}")
        return value

    def init(self) -> bool:
        from postbox.effects.acl import aclfile, key_patterns

        admin, consumer = self._passwords()
        if not admin or not consumer:
            raise StackError(f"Redis passwords missing from {self.layout.secrets_file}", fix="run `postbox up` (it generates them)")
        acl_changed = False
        if self.node == 1:  # one aclfile for every node: the same users everywhere, written once
            acl_changed = write_if_changed(self.acl_path, aclfile(admin, consumer, key_patterns(), waitaof=self.has_waitaof()))
            os.chmod(self.acl_path, 0o600)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        conf = render("redis.conf", {"redis_port": self.port, "data_dir": self.data_dir, "appendfsync": self.appendfsync(),
                                     "aclfile": self.acl_path})
        if self.replicated:
            conf += "\n" + render("redis-replication.conf", {"admin_password": admin})
        changed = write_if_changed(self.config_path, conf)
        os.chmod(self.config_path, 0o600)
        return changed or acl_changed

    def has_waitaof(self) -> bool:
        """Whether this stack's redis-server has WAITAOF (Redis 7.2+, any Valkey): from its
        ``--version``, before it runs, since its ACL file must not name a command it lacks."""
        if self.redis_server is None:
            return False
        done = subprocess.run([str(self.redis_server), "--version"], capture_output=True, text=True, timeout=10)
        return server_has_waitaof(done.stdout)

    def start(self, replica_of: int | None = None) -> str:
        """Start the node; ``replica_of``: the port of the primary it replicates (replicated nodes only)."""
        if self.running():
            return "already running"
        if port_open("127.0.0.1", self.port):
            raise StackError(
                f"port {self.port} (Redis {self.name}) is taken by {port_owner(self.port) or 'another process'}",
                fix="stop it (e.g. `systemctl stop redis-server`) or set POSTBOX_REDIS_PORT to a free port "
                    "(replicas listen just above it)",
            )
        if self.replicated:
            role = [f"replicaof 127.0.0.1 {replica_of}"] if replica_of is not None else []
            self.start_config.write_text("\n".join([f"include {self.config_path}", *role]) + "\n")
            os.chmod(self.start_config, 0o600)
        self.process.start([str(self.redis_server), str(self.start_config)], umask=0o077)
        if self.node == 1:
            if "aclfile " in self.config_path.read_text():
                self.acl_marker.write_text(f"port={self.port}\n")  # read by postbox.stack.addresses.local_stack_env
            else:
                self.acl_marker.unlink(missing_ok=True)
        if not wait_until(self.ready, 30):
            raise StackError(f"Redis ({self.name}) did not answer PING within 30 s (log: {self.log_path})")
        return "started"

    def ready(self) -> bool:
        import redis

        if not self.process.running():
            raise StackError(f"redis-server ({self.name}) exited during start{self.process.exit_reason()}")
        try:
            client = redis.Redis.from_url(self.admin_url(), socket_timeout=1)
            try:
                return bool(client.ping())
            finally:
                client.close()
        except redis.exceptions.BusyLoadingError:
            return False
        except redis.AuthenticationError as exc:
            raise StackError(f"Redis refused the stack's admin password ({exc})", fix="`postbox down && postbox up` to restart it with the current aclfile") from exc
        except (redis.ConnectionError, redis.TimeoutError):  # not listening yet, or too busy to answer in 1 s
            return False

    def stop(self) -> bool:
        # SIGTERM makes Redis fsync the AOF and exit cleanly.
        return self.process.stop(timeout=30)


def server_has_waitaof(version_line: str) -> bool:
    """``Redis server v=7.2.4 ...`` → True; 7.0 → False; a Valkey server (its v= is its own, 7.2
    compatible from its first release) → True."""
    match = re.search(r"\bv=(\d+)\.(\d+)", version_line)
    if match is None:
        return False
    major, minor = int(match.group(1)), int(match.group(2))
    return "Valkey" in version_line or (major, minor) >= (7, 2)


def node_role(node: LocalRedis) -> str:
    """``primary``, ``replica of 127.0.0.1:<port>`` or ``unknown`` (stopped, or not answering): `postbox status`."""
    import redis

    if not node.running():
        return "unknown"
    try:
        client = redis.Redis.from_url(node.admin_url(), socket_timeout=2, decode_responses=True)
        try:
            info = client.info("replication")
        finally:
            client.close()
    except redis.RedisError:
        return "unknown"
    if info.get("role") == "master":
        return "primary"
    return f"replica of {info.get('master_host')}:{info.get('master_port')}"
