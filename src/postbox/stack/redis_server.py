"""Redis of the local stack: AOF on, `appendfsync always` unless POSTBOX_REDIS_APPENDFSYNC says otherwise."""

from __future__ import annotations

import os
from pathlib import Path

from postbox.errors import StackError
from postbox.stack.layout import StackLayout
from postbox.stack.processes import ManagedProcess, port_open, port_owner, wait_until
from postbox.stack.templates import render, write_if_changed

APPENDFSYNC_CHOICES = ("always", "everysec", "no")


class LocalRedis:
    name = "redis"

    def __init__(self, layout: StackLayout, redis_server: Path | None, port: int) -> None:
        self.layout = layout
        self.redis_server = redis_server
        self.port = port
        # Redis rewrites its process title ("redis-server 127.0.0.1:6379"), so the config path is not
        # visible there; the binary name plus the pid file is what we can check.
        self.process = ManagedProcess("redis", layout.pidfile("redis"), layout.log("redis"), marker="redis-server")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.layout.log("redis")

    @property
    def config_path(self) -> Path:
        return self.layout.run / "redis.conf"

    def appendfsync(self) -> str:
        value = os.environ.get("POSTBOX_REDIS_APPENDFSYNC", "always")
        if value not in APPENDFSYNC_CHOICES:
            raise StackError(f"POSTBOX_REDIS_APPENDFSYNC={value!r}: expected one of {', '.join(APPENDFSYNC_CHOICES)}")
        return value

    def running(self) -> bool:
        return self.process.running()

    def pid(self) -> int | None:
        return self.process.pid()

    def init(self) -> bool:
        conf = render("redis.conf", {"redis_port": self.port, "data_dir": self.layout.redis_dir, "appendfsync": self.appendfsync()})
        return write_if_changed(self.config_path, conf)

    def start(self) -> str:
        if self.running():
            return "already running"
        if port_open("127.0.0.1", self.port):
            raise StackError(
                f"port {self.port} (Redis) is taken by {port_owner(self.port) or 'another process'}",
                fix="stop it (e.g. `systemctl stop redis-server`) or set POSTBOX_REDIS_PORT to a free port",
            )
        self.process.start([str(self.redis_server), str(self.config_path)])
        if not wait_until(self.ready, 30):
            raise StackError(f"Redis did not answer PING within 30 s (log: {self.log_path})")
        return "started"

    def ready(self) -> bool:
        import redis

        if not self.process.running():
            raise StackError(f"redis-server exited during start (log: {self.log_path})")
        try:
            client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1)
            try:
                return bool(client.ping())
            finally:
                client.close()
        except redis.exceptions.BusyLoadingError:
            return False
        except redis.ConnectionError:
            return False

    def stop(self) -> bool:
        # SIGTERM makes Redis fsync the AOF and exit cleanly.
        return self.process.stop(timeout=30)

    def kill(self) -> bool:
        return self.process.kill()
