"""A replicated Redis for tests: a primary, its replica(s) and three Sentinels, all private processes.

Why: a failover can only be rehearsed on a real topology. Debian ships ``redis-server`` and
``redis-sentinel``; each process here is a :class:`~postbox.testing.RedisServer` (or a Sentinel
beside them) on a free loopback port with its own folder, ended by :meth:`Topology.stop`, which
stops exactly the processes it started.

The Sentinels are tuned for a test: the primary is taken for down after ``down_after_ms``
(1 s), a failover that stalls is given up after ``failover_timeout_ms`` (a second attempt may
start after twice that). A replica can be held back from replicating (:meth:`Topology.pause`,
SIGSTOP: the primary's writes then pile up in its output buffer to that replica) to open the
window asynchronous replication leaves.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from postbox.testing.server import RedisServer, free_port

SENTINEL = shutil.which("redis-sentinel") or "/usr/bin/redis-sentinel"
SERVICE = "postbox"


class Sentinel:
    """One redis-sentinel process watching ``service`` (its config file is its own: Sentinel rewrites it)."""

    def __init__(self, root: Path, primary_port: int, *, quorum: int, down_after_ms: int, failover_timeout_ms: int) -> None:
        self.port = free_port()
        self.dir = root / f"sentinel-{self.port}"
        self.dir.mkdir()
        self.lines = [
            f"port {self.port}", "bind 127.0.0.1", "protected-mode no", f"dir {self.dir}", f"logfile {self.dir / 'sentinel.log'}",
            f"sentinel monitor {SERVICE} 127.0.0.1 {primary_port} {quorum}",
            f"sentinel down-after-milliseconds {SERVICE} {down_after_ms}",
            f"sentinel failover-timeout {SERVICE} {failover_timeout_ms}",
            f"sentinel parallel-syncs {SERVICE} 1",
        ]
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> "Sentinel":
        conf = self.dir / "sentinel.conf"
        conf.write_text("\n".join(self.lines) + "\n")
        self.process = subprocess.Popen([SENTINEL, str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: _answers(self.port), 15, f"sentinel on port {self.port} answering")
        return self

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2, decode_responses=True)

    def master(self) -> dict[str, Any]:
        client = self.client()
        try:
            return dict(client.sentinel_master(SERVICE))
        finally:
            client.close()

    def log(self) -> str:
        path = self.dir / "sentinel.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        self.process = None


class Topology:
    """A primary, ``replicas`` replicas and ``sentinels`` Sentinels (quorum: a majority).

    ``config``: more settings of every data node (``binary``: their server, e.g. one with WAITAOF).
    The nodes start durable as the consumer requires (AOF, ``appendfsync always``)."""

    def __init__(self, *, replicas: int = 1, sentinels: int = 3, config: dict[str, str] | None = None, binary: str | None = None,
                 down_after_ms: int = 1000, failover_timeout_ms: int = 6000) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="postbox-sentinel-"))
        self.primary = RedisServer(config=config, workdir=self._node_dir("primary"), binary=binary)
        self.replicas = [RedisServer(config={**(config or {}), "replicaof": f"127.0.0.1 {self.primary.port}"},
                                     workdir=self._node_dir(f"replica{i}"), binary=binary) for i in range(replicas)]
        self.sentinels = [Sentinel(self.dir, self.primary.port, quorum=sentinels // 2 + 1, down_after_ms=down_after_ms,
                                   failover_timeout_ms=failover_timeout_ms) for _ in range(sentinels)]
        self._stopped: set[int] = set()

    def _node_dir(self, name: str) -> Path:
        path = self.dir / name
        path.mkdir()
        return path

    @property
    def nodes(self) -> list[RedisServer]:
        return [self.primary, *self.replicas]

    @property
    def url(self) -> str:
        """The ``redis+sentinel://`` URL of the service (every Sentinel listed)."""
        return "redis+sentinel://" + ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels) + f"/{SERVICE}"

    def start(self) -> "Topology":
        try:
            for node in self.nodes:
                node.start()
            for replica in self.replicas:
                wait_for(lambda r=replica: _link_up(r), 30, f"replica {replica.port} in sync with the primary")
            for sentinel in self.sentinels:
                sentinel.start()
            wait_for(self._sentinels_settled, 60, "every Sentinel seeing the replicas and the other Sentinels")
        except BaseException:
            self.stop()
            raise
        return self

    def _sentinels_settled(self) -> bool:
        others = len(self.sentinels) - 1
        states = [s.master() for s in self.sentinels]
        return all(int(m["num-slaves"]) == len(self.replicas) and int(m["num-other-sentinels"]) == others for m in states)

    def master_port(self) -> int:
        """The primary's port as the Sentinels see it now (the first that answers)."""
        for sentinel in self.sentinels:
            try:
                return int(sentinel.master()["port"])
            except redis.RedisError:
                continue
        raise AssertionError("no Sentinel answered")

    def node(self, port: int) -> RedisServer:
        [found] = [n for n in self.nodes if n.port == port]
        return found

    def current_primary(self) -> RedisServer:
        return self.node(self.master_port())

    def admin(self) -> redis.Redis:
        """A client of the current primary (bytes replies), following failovers as the consumer does."""
        from redis.sentinel import Sentinel as SentinelClient

        manager = SentinelClient([("127.0.0.1", s.port) for s in self.sentinels], socket_timeout=2)
        return manager.master_for(SERVICE, socket_timeout=2, socket_connect_timeout=1)

    def wait_promoted(self, old_port: int, timeout: float = 60) -> RedisServer:
        """The replica the Sentinels promoted after the primary on ``old_port`` died."""
        wait_for(lambda: self.master_port() != old_port and _role(self.current_primary()) == "master", timeout,
                 f"a replica promoted after the primary on port {old_port} died", on_timeout=self.sentinel_logs)
        return self.current_primary()

    def pause(self, node: RedisServer) -> None:
        """SIGSTOP ``node``: it reads nothing (a replica falls behind; its primary's output buffer grows)."""
        assert node.process is not None
        os.kill(node.process.pid, signal.SIGSTOP)
        self._stopped.add(node.process.pid)

    def resume(self, node: RedisServer) -> None:
        if node.process is not None and node.process.pid in self._stopped:
            os.kill(node.process.pid, signal.SIGCONT)
            self._stopped.discard(node.process.pid)

    def sentinel_logs(self) -> str:
        return "\n".join(f"--- sentinel {s.port}\n{s.log()[-3000:]}" for s in self.sentinels)

    def stop(self) -> None:
        for node in self.nodes:
            self.resume(node)
        for sentinel in self.sentinels:
            sentinel.stop()
        for node in self.nodes:
            node.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "Topology":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, on_timeout: Callable[[], str] | None = None) -> float:
    """Seconds until ``predicate()`` holds (errors count as not yet); AssertionError naming ``what``."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            if predicate():
                return time.monotonic() - started
        except (redis.RedisError, OSError, KeyError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}" + (f"\n{on_timeout()}" if on_timeout else ""))


def _answers(port: int) -> bool:
    client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.5)
    try:
        return bool(client.ping())
    finally:
        client.close()


def _role(node: RedisServer) -> str:
    client = node.client(socket_timeout=2)
    try:
        return str(client.info("replication")["role"])
    finally:
        client.close()


def _link_up(replica: RedisServer) -> bool:
    """In sync, and done rewriting the AOF the sync starts (till then its fsyncs confirm nothing)."""
    client = replica.client(socket_timeout=2)
    try:
        persistence = client.info("persistence")
        settled = not int(persistence.get("aof_rewrite_in_progress", 0)) and not int(persistence.get("aof_rewrite_scheduled", 0))
        return client.info("replication").get("master_link_status") == "up" and settled
    finally:
        client.close()
