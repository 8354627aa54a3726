"""A fault run whose Redis is a Redis Cluster of its own: three masters with a replica each
(tests/support/redis_servers.py, private processes on loopback), reached by the consumer through a
``redis+cluster://`` URL. PostgreSQL, Debezium and Kafka are the shared stack's, untouched: the
run kills only processes it started, so it is not ``disruptive``.

:meth:`ClusterFailoverRun.kill_master` SIGKILLs the master that serves the most of the run's
aggregates, right after an apply was acknowledged, and measures what a cluster failover means for
the consumer: how long until the cluster promoted the dead master's replica (``cluster-node-timeout``
plus the replica's election), how many events of the *other* masters' slots were applied in that
window (they must keep flowing: ``cluster-require-full-coverage no``, the consumer's per-node apply),
and the recovery of the dead master's own slots (kill → the first event committed after the kill
whose aggregate lives there, applied on the promoted replica).

Every count is read from each node with a plain client, not through a cluster client, so that what
is measured in the window does not depend on a client's view of the slot map.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import redis
from redis.crc import key_slot

from tests.faults.harness import FaultRun, Kill
from tests.support.redis_servers import RedisClusterProcesses, RedisServer

#: Failure detection in a few seconds, never a spurious one on a loaded 2-core host: a master is
#: failed after 3 s without a reply; a replica fails over whatever its data's age (it is in sync).
CLUSTER_CONFIG = {"cluster-require-full-coverage": "no", "cluster-node-timeout": "3000", "cluster-replica-validity-factor": "0"}


class ClusterFailoverRun(FaultRun):
    """A :class:`FaultRun` on a private 3-master cluster with a replica per master (module docs)."""

    def __init__(self, scenario: str, tmp: Path, *, log: Callable[[str], None] = print, **kwargs: Any) -> None:
        self.cluster = RedisClusterProcesses(replicas=1, config=CLUSTER_CONFIG).start()
        try:
            env = {"POSTBOX_REDIS_URL": self.cluster.url, **kwargs.pop("consumer_env", {})}
            admin = redis.RedisCluster(host="127.0.0.1", port=self.cluster.servers[0].port, socket_timeout=5, socket_connect_timeout=2)
            super().__init__(scenario, tmp, log=log, consumer_env=env, redis_client=admin,  # type: ignore[arg-type]
                             restore_stack=False, **kwargs)
        except BaseException:
            self.cluster.stop()
            raise
        roles = self.cluster.roles()
        self.log(f"   [{scenario}] Redis Cluster: " + ", ".join(
            f"master {m} (replica {', '.join(str(r) for r, of in roles.items() if of == m)})" for m, of in roles.items() if of is None))

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.cluster.stop()

    # observations, per node ------------------------------------------------------------------------
    def applied_count(self) -> int:
        """Through the cluster client; -1 while it cannot tell (a slot without a master)."""
        try:
            return super().applied_count()
        except redis.RedisError:
            return -1

    def _is_applied(self, aggregate_id: str, event_id: str) -> bool:
        try:
            return super()._is_applied(aggregate_id, event_id)
        except redis.RedisError:
            return False

    def owners(self) -> dict[str, int]:
        """Each aggregate -> the port of the master serving its slot now."""
        client = self._live_node().client(socket_timeout=5)
        try:
            ranges = client.execute_command("CLUSTER", "SLOTS")
        finally:
            client.close()
        by_slot = [(int(start), int(end), int(nodes[1])) for start, end, nodes, *_ in ranges]
        out = {}
        for agg in self.emitter.ids:
            slot = key_slot(f"{self.aggregate_type}:{agg}".encode())
            [port] = [port for start, end, port in by_slot if start <= slot <= end]
            out[agg] = port
        return out

    def _live_node(self) -> RedisServer:
        return next(s for s in self.cluster.servers if s.process is not None)

    def applied_on(self, port: int, aggregates: list[str]) -> int:
        """Events of ``aggregates`` applied, read from the node on ``port`` itself."""
        client = self.cluster.node(port).client(socket_timeout=5)
        try:
            pipe = client.pipeline(transaction=False)
            for agg in aggregates:
                pipe.llen(f"{{{self.aggregate_type}:{agg}}}:seq")
            return sum(pipe.execute())
        finally:
            client.close()

    def _applied_there(self, port: int, aggregate_id: str, event_id: str) -> bool:
        client = self.cluster.node(port).client(socket_timeout=2)
        try:
            return bool(client.hexists(f"{{{self.aggregate_type}:{aggregate_id}}}:applied", event_id))
        except redis.RedisError:
            return False
        finally:
            client.close()

    # the kill --------------------------------------------------------------------------------------
    def kill_master(self) -> Kill:
        """SIGKILL the busiest master right after an ack; wait for its replica to take over; record
        the recovery of its slots and the evidence (who died, who took over, what flowed meanwhile)."""
        owners = self.owners()
        by_master: dict[int, list[str]] = {}
        for agg, port in owners.items():
            by_master.setdefault(port, []).append(agg)
        victim_port = max(by_master, key=lambda p: len(by_master[p]))
        others = {p: aggs for p, aggs in by_master.items() if p != victim_port}
        assert others, f"every aggregate of the run lives on one master: {by_master}"
        [replica_port] = [port for port, of in self.cluster.roles().items() if of == victim_port]
        base = self.applied_count()
        self.wait(lambda: self.applied_count() > base, 60, "an apply acknowledged", interval=0.005)
        before = {p: self.applied_on(p, aggs) for p, aggs in others.items()}
        at = time.monotonic()
        self.cluster.node(victim_port).kill()
        other_aggs = {a for aggs in others.values() for a in aggs}
        watches = {
            "took over": lambda: self._promoted(replica_port),
            "flowing": self._recovered(at, other_aggs, lambda agg: owners[agg]),
            "own": self._recovered(at, set(by_master[victim_port]), lambda _agg: replica_port),
        }
        seen: dict[str, float] = {}
        during: dict[int, int] = {}

        def all_seen() -> bool:
            for name, check in watches.items():
                if name not in seen and check():
                    seen[name] = time.monotonic() - at
                    if name == "took over":
                        during.update({p: self.applied_on(p, aggs) - before[p] for p, aggs in others.items()})
            return len(seen) == len(watches)

        self.wait(all_seen, 180, f"the replica {replica_port} promoted and events committed after the kill applied on every master",
                  interval=0.02)
        took_over, flowing, own = seen["took over"], seen["flowing"], seen["own"]
        kill = Kill("redis", "SIGKILL a master right after an ack", own, took_over, at=at)
        self.kills.append(kill)
        self.log(f"   [{self.scenario}] kill redis master {victim_port}: replica {replica_port} took over after {took_over:.2f} s, "
                 f"its slots recovered after {own:.2f} s, the others' {flowing:.2f} s")
        self.evidence.append(
            f"master 127.0.0.1:{victim_port} (the slots of {len(by_master[victim_port])} of the {len(owners)} aggregates) SIGKILLed; "
            f"its replica 127.0.0.1:{replica_port} took over {took_over:.1f} s later; meanwhile "
            + ", ".join(f"{n} events were applied on master {p}'s slots" for p, n in sorted(during.items()))
            + f"; on the other masters' slots the first event committed after the kill was applied {flowing:.2f} s after it; "
            f"on the dead master's slots {own:.2f} s after it (the recovery above), on the promoted replica")
        self.window = (took_over, during, flowing, own)
        return kill

    def _promoted(self, port: int) -> bool:
        roles = self.cluster.roles(self.cluster.node(port))
        return roles.get(port, "absent") is None

    def _recovered(self, killed_at: float, aggregates: set[str], node_of: Callable[[str], int]) -> Callable[[], bool]:
        """Whether the first event committed after the kill on ``aggregates`` is applied yet
        (read on ``node_of(its aggregate)``, the master serving its slot after the kill)."""
        def check() -> bool:
            with self.emitter.lock:
                event = next((c for c in self.emitter.committed if c.at > killed_at and c.aggregate_id in aggregates), None)
            return event is not None and self._applied_there(node_of(event.aggregate_id), event.aggregate_id, event.id)

        return check
