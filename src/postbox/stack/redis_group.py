"""The local stack's Redis: one node, or a primary with replicas and three Sentinels.

Who is primary is the Sentinels' call once they run: after a failover they name another node.
`up` therefore asks them (or, with every Sentinel stopped, reads what `down` recorded in
``run/redis-primary``) and starts a stopped node as a replica of that primary, so a restart never
brings back two primaries. The consumers of a replicated stack get a ``redis+sentinel://`` URL and
follow a promotion without a restart; the stack's own administration talks to the primary of now.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from postbox.stack.layout import StackLayout
from postbox.stack.nodes import process_status
from postbox.stack.ports import StackPorts
from postbox.stack.redis_server import LocalRedis, node_role
from postbox.stack.sentinel import SERVICE, LocalSentinel
from postbox.stack.topology import Topology

PRIMARY_RECORD = "redis-primary"


class LocalRedisGroup:
    """Redis nodes 1..1+replicas and their Sentinels, under one state folder."""

    def __init__(self, layout: StackLayout, redis_server: Path | None, ports: StackPorts, topology: Topology) -> None:
        self.layout = layout
        replicated = topology.redis_replicas > 0
        self.nodes = [LocalRedis(layout, redis_server, ports.redis_node(n), node=n, replicated=replicated)
                      for n in range(1, topology.redis_replicas + 2)]
        quorum = topology.sentinels // 2 + 1
        self.sentinels = [LocalSentinel(layout, redis_server, ports.sentinel_node(s), index=s, quorum=quorum)
                          for s in range(1, topology.sentinels + 1)]

    @property
    def replicated(self) -> bool:
        return bool(self.sentinels)

    @property
    def processes(self) -> list[Any]:
        return [*self.nodes, *self.sentinels]

    # -- who is primary ---------------------------------------------------------------------------
    def primary(self) -> LocalRedis:
        """The node the running Sentinels name (the majority's answer), else the recorded one, else node 1."""
        named = [port for port in (s.primary_port() for s in self.sentinels if s.running()) if port is not None]
        if named:
            port = max(set(named), key=named.count)
            found = [node for node in self.nodes if node.port == port]
            if found:
                return found[0]
        return self._recorded_primary()

    def _recorded_primary(self) -> LocalRedis:
        try:
            number = int((self.layout.run / PRIMARY_RECORD).read_text().strip())
        except (OSError, ValueError):
            return self.nodes[0]
        return next((node for node in self.nodes if node.node == number), self.nodes[0])

    def _record_primary(self, node: LocalRedis) -> None:
        (self.layout.run / PRIMARY_RECORD).write_text(f"{node.node}\n")

    # -- up / down --------------------------------------------------------------------------------
    def start(self) -> list[tuple[str, str]]:
        """Start what is stopped: the primary, the replicas (of that primary), then the Sentinels.
        ``(name, outcome)`` for each process."""
        primary = self.primary()
        outcomes = [(primary.name, primary.start())]
        for node in self.nodes:
            if node is not primary:
                outcomes.append((node.name, node.start(replica_of=primary.port if self.replicated else None)))
        for sentinel in self.sentinels:
            sentinel.init(primary.port)
            outcomes.append((sentinel.name, sentinel.start()))
        if self.replicated:
            self._record_primary(primary)
            self._mark_sentinels()
        return outcomes

    def _mark_sentinels(self) -> None:
        """Tell the CLI's local settings to reach Redis through the Sentinels (postbox.stack.addresses)."""
        marker = self.nodes[0].acl_marker
        if marker.is_file():
            lines = [line for line in marker.read_text().splitlines() if not line.startswith("sentinels=")]
            lines.append("sentinels=" + ",".join(str(s.port) for s in self.sentinels))
            marker.write_text("\n".join(lines) + "\n")

    def stop(self) -> list[tuple[str, bool]]:
        """Record the primary, stop the Sentinels first (no failover while the nodes go), then the
        replicas, then the primary."""
        primary = self.primary()
        if self.replicated:
            self._record_primary(primary)
        stopped = [(s.name, s.stop()) for s in self.sentinels]
        stopped += [(node.name, node.stop()) for node in self.nodes if node is not primary]
        stopped.append((primary.name, primary.stop()))
        return stopped

    # -- addresses --------------------------------------------------------------------------------
    def consumer_url(self) -> str:
        """The consumers' URL: the node's, or the Sentinels' service with the consumer user."""
        single = self.nodes[0].consumer_url()
        if not self.replicated:
            return single
        credentials = single.split("://", 1)[1].rsplit("@", 1)[0] + "@" if "@" in single else ""
        hosts = ",".join(s.address for s in self.sentinels)
        return f"redis+sentinel://{credentials}{hosts}/{SERVICE}/0"

    def admin_url(self) -> str:
        """The ``default`` user's URL of the primary of now (administration: tests, benchmarks, the demo)."""
        return self.primary().admin_url()

    # -- status -----------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """Each node with its role, each Sentinel with the primary it names."""
        nodes = [{**process_status(node), "role": node_role(node)} for node in self.nodes]
        sentinels = []
        for sentinel in self.sentinels:
            line = process_status(sentinel)
            port = sentinel.primary_port() if sentinel.running() else None
            sentinels.append({**line, "primary": f"127.0.0.1:{port}" if port else None})
        return {"nodes": nodes, "sentinels": sentinels}
