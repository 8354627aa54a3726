"""Fault runs on a private Kafka cluster and Connect group (tests/support/replicated_kafka.py),
started by the stack's own code in a topology of several nodes or workers. PostgreSQL and Redis
are the shared stack's, untouched; the run kills only processes it started, so it is not
``disruptive``.

- :class:`KafkaFailoverRun`: 3 KRaft nodes (replication factor 3, ``min.insync.replicas=2``;
  Connect's producer ``acks=all`` with idempotence). :meth:`~KafkaFailoverRun.kill_node` SIGKILLs
  the leader of a busy partition or the group's coordinator under load, records who took over and
  the recovery (kill → the first event committed after the kill applied), then starts the node
  again and waits until it is back in sync (so the next kill again leaves two of three copies).
- :class:`ConnectFailoverRun`: 2 distributed workers; :meth:`~ConnectFailoverRun.kill_task_worker`
  SIGKILLs the worker running the connector's task and records the worker it moved to.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from postbox.stack.topology import Topology
from tests.faults.harness import FaultRun, Kill
from tests.support.replicated_kafka import PrivateCluster


class ClusterFaultRun(FaultRun):
    """A :class:`FaultRun` whose topic and connector live on a private cluster of ``topology``."""

    def __init__(self, scenario: str, tmp: Path, topology: Topology, *, log: Callable[[str], None] = print, **kwargs: Any) -> None:
        self.cluster = PrivateCluster(tmp / "cluster", topology, log=log).start()
        try:
            super().__init__(scenario, tmp, log=log, kafka_bootstrap=self.cluster.bootstrap, connect_url=self.cluster.connect_url(),
                             replication_factor=topology.replication_factor, restore_stack=False, **kwargs)
        except BaseException:
            self.cluster.close()
            raise
        self.stack = self.cluster.stack  # the stall report reads this cluster's Connect log

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.cluster.close()

    def _acknowledged(self) -> None:
        base = self.applied_count()
        self.wait(lambda: self.applied_count() > base, 60, "progress before the kill", interval=0.01)


class KafkaFailoverRun(ClusterFaultRun):
    def __init__(self, scenario: str, tmp: Path, *, log: Callable[[str], None] = print, **kwargs: Any) -> None:
        super().__init__(scenario, tmp, Topology(3, 1), log=log, partitions=kwargs.pop("partitions", 3), **kwargs)

    def _new_role(self, role: str, partition: int, old: int) -> int:
        if role == "leader":
            leader = self.cluster.leader(self.topic, partition)
            return leader if leader not in (-1, old) else -1
        coordinator = self.cluster.coordinator(self.group)
        return coordinator if coordinator != old else -1

    def kill_node(self, role: str, partition: int = 0) -> Kill:
        """SIGKILL the node that is ``role`` ("leader": of ``partition`` of the topic;
        "coordinator": of the consumer group) right after an apply, under the writer's load."""
        victim = self.cluster.leader(self.topic, partition) if role == "leader" else self.cluster.coordinator(self.group)
        what = f"leader of {self.topic}[{partition}]" if role == "leader" else f"coordinator of group {self.group}"
        before_state = self.cluster.partition_state(self.topic)
        self._acknowledged()
        before = self._signals()
        at = time.monotonic()
        assert self.cluster.node(victim).kill(), f"node {victim} was not running"
        successor = -1
        deadline = at + 120
        while successor == -1 and time.monotonic() < deadline:
            try:
                successor = self._new_role(role, partition, victim)
            except Exception:
                successor = -1
            if successor == -1:
                time.sleep(0.05)
        took_over_s = time.monotonic() - at
        assert successor != -1, f"no node took over as {what} within 120 s of node {victim}'s kill"
        kill = self._record("kafka", f"SIGKILL node {victim}, {role}", at, 0.0)
        seen_by_lag = self._lag_nodes_without(victim)
        kill.restart_s = self.cluster.restart(self.cluster.node(victim))
        self.cluster.wait_in_sync(self.topic)
        after = self._signals()
        isr = {p: s["isrs"] for p, s in before_state.items()}
        self.evidence.append(
            f"node {victim} ({what}; ISR before {isr}) SIGKILLed; node {successor} took over as {role} {took_over_s:.1f} s later; "
            f"the consumers logged {after['kafka_errors'] - before['kafka_errors']} Kafka client error(s); node {victim} restarted "
            f"in {kill.restart_s:.1f} s and back in every ISR; `postbox lag` while it was down: {seen_by_lag}")
        return kill

    def _lag_nodes_without(self, victim: int, timeout: float = 60) -> str:
        """`postbox lag`'s node column for the group while ``victim`` is down: no partition led by
        it and it out of every in-sync set (what an operator reads to see the cluster degraded)."""
        from postbox.incident.lag import group_lag
        from postbox.kafka_cluster import Kafka

        deadline = time.monotonic() + timeout
        while True:
            with Kafka(self.cluster.bootstrap, timeout=10) as kafka:
                parts = [p for g in group_lag(kafka, [self.group]) for p in g.partitions if p.topic == self.topic]
            if parts and all(p.leader not in (None, victim) and victim not in p.isrs for p in parts):
                return "; ".join(f"[{p.partition}] {p.nodes()}" for p in parts)
            if time.monotonic() > deadline:
                raise AssertionError(f"`postbox lag` still shows node {victim} leading or in sync {timeout:.0f} s after its kill: "
                                     + "; ".join(f"[{p.partition}] {p.nodes()}" for p in parts))
            time.sleep(0.5)


class ConnectFailoverRun(ClusterFaultRun):
    def __init__(self, scenario: str, tmp: Path, *, log: Callable[[str], None] = print, **kwargs: Any) -> None:
        super().__init__(scenario, tmp, Topology(1, 2), log=log, **kwargs)

    def kill_task_worker(self) -> Kill:
        """SIGKILL the worker that runs the connector's task, right after an apply; the task must
        move to the other worker (not restarted: the survivor carries the pipeline alone)."""
        victim_id = self.cluster.task_worker()
        assert victim_id is not None, "the connector's task is not RUNNING before the kill"
        victim = self.cluster.worker_at(victim_id)
        ends = self.topic_ends()
        self._acknowledged()
        at = time.monotonic()
        assert victim.kill(), f"worker {victim_id} was not running"
        successor = None
        deadline = at + 150
        while time.monotonic() < deadline:
            try:
                successor = self.cluster.task_worker()
            except Exception:
                successor = None
            if successor is not None and successor != victim_id:
                break
            time.sleep(0.1)
        moved_s = time.monotonic() - at
        assert successor is not None and successor != victim_id, f"the task did not move off {victim_id} within 150 s"
        kill = self._record("connect", f"SIGKILL worker {victim_id}, task's", at, 0.0)
        self.evidence.append(
            f"worker {victim_id} (running the task; topic ends {ends} before the kill) SIGKILLed; the task RUNNING on {successor} "
            f"{moved_s:.1f} s later (the group noticed the missing heartbeats, rebalanced, and the task resumed from the last "
            f"flushed source offset)")
        return kill
