"""A private Redis primary and its replica for benchmarks, from the library's public test hook.

Why: a replica wait can only be measured against a real replica, and a benchmark observes the
code through public hooks only (``postbox.testing.RedisServer``: a free loopback port, its own
folder, durable as the consumer requires: AOF with ``appendfsync always``). ``stop()`` ends
exactly the two processes it started.
"""

from __future__ import annotations

import time

from postbox.testing import RedisServer


class ReplicatedRedis:
    """A primary and one replica (``replicaof``), both private redis-server processes."""

    def __init__(self) -> None:
        self.primary = RedisServer()
        self.replica: RedisServer | None = None

    def start(self, timeout: float = 60) -> str:
        """Start both; once the replica is in sync (and done rewriting the AOF its sync starts:
        till then it confirms nothing), the primary's URL."""
        self.primary.start()
        self.replica = RedisServer(config={"replicaof": f"127.0.0.1 {self.primary.port}"}).start()
        client = self.replica.client(socket_timeout=5)
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                persistence = client.info("persistence")
                rewriting = int(persistence.get("aof_rewrite_in_progress", 0)) or int(persistence.get("aof_rewrite_scheduled", 0))
                if client.info("replication").get("master_link_status") == "up" and not rewriting:
                    return self.primary.url
                time.sleep(0.1)
        finally:
            client.close()
        self.stop()
        raise SystemExit(f"bench: the replica of 127.0.0.1:{self.primary.port} was not in sync within {timeout:.0f} s")

    def stop(self) -> None:
        if self.replica is not None:
            self.replica.stop()
        self.primary.stop()
