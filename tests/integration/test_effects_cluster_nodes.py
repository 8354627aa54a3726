"""#14.2 per-node apply on a real 3-master Redis Cluster: one master stopped (SIGSTOP) holds back only
the events whose slots live on it, and every event takes effect exactly once when it is back.

The cluster runs with ``cluster-require-full-coverage no``: with Redis's default the two other
masters refuse every command once they mark the stopped one failed (``cluster-node-timeout``), and
no client can do better than wait (docs/consumer.md says so)."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
import redis

from postbox.effects import Effects, EffectsEngine, EventRef, aggregate_keys
from tests.support.redis_servers import RedisClusterProcesses, partial_coverage_cluster

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster() -> Iterator[RedisClusterProcesses]:
    with partial_coverage_cluster() as nodes:
        yield nodes


def _events(client: redis.RedisCluster, n: int, tag: str):
    """``n`` events of distinct aggregates (one INCRBY each) and the node name of each."""
    out = []
    for i in range(n):
        agg = f"{tag}{i}-{uuid.uuid4().hex[:6]}"
        k = aggregate_keys("order", agg)
        out.append((EventRef.for_aggregate(str(uuid.uuid4()), "order", agg), Effects().incrby(k("n"), 1), k("n")))
    return out, [client.get_node_from_key(key).name for _, _, key in out]


def test_a_stopped_master_holds_back_only_its_events_and_each_applies_once_after_it_returns(cluster) -> None:
    client = redis.RedisCluster(host="127.0.0.1", port=cluster.servers[0].port, socket_timeout=2)
    engine = EffectsEngine(client, "billing", functions_dir=None, node_wait=timedelta(seconds=1))
    events, nodes = _events(client, 60, "a")
    assert all(r.applied for r in engine.apply([(e, fx) for e, fx, _ in events], partial=True))
    stopped = cluster.servers[0]
    stopped_name = f"127.0.0.1:{stopped.port}"
    assert stopped_name in nodes and len(set(nodes)) == 3
    os.kill(stopped.process.pid, signal.SIGSTOP)
    try:
        first, first_nodes = _events(client, 60, "b")
        results = engine.apply([(e, fx) for e, fx, _ in first], partial=True)
        for result, node in zip(results, first_nodes):
            assert result.retry if node == stopped_name else result.applied, (node, result)
        # the node is down now: its events come back at once as retries, the others apply
        second, second_nodes = _events(client, 60, "c")
        results = engine.apply([(e, fx) for e, fx, _ in second], partial=True)
        held = [(r, n) for r, n in zip(results, second_nodes) if n == stopped_name]
        assert held and all(r.retry and r.reason == "node-down" for r, _ in held)
        assert all(r.applied for r, n in zip(results, second_nodes) if n != stopped_name)
        with pytest.raises(Exception, match="down"):  # without partial: the batch is refused as before
            engine.apply([(e, fx) for e, fx, _ in second])
    finally:
        os.kill(stopped.process.pid, signal.SIGCONT)
    everything = first + second
    deadline = time.monotonic() + 30
    while True:
        results = engine.apply([(e, fx) for e, fx, _ in everything], partial=True)
        if not any(r.retry for r in results) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not any(r.retry for r in results), [r for r in results if r.retry][:2]
    assert all(client.get(key) == b"1" for _, _, key in everything)  # each once, the stalled calls included
    client.close()


def test_an_event_ordered_after_a_held_back_one_on_another_node_waits_for_it(cluster) -> None:
    """Same order key (one Kafka key), slots on two different masters: while the first event's
    master is stopped the second is not sent; both apply, in order, once it is back."""
    client = redis.RedisCluster(host="127.0.0.1", port=cluster.servers[0].port, socket_timeout=2)
    engine = EffectsEngine(client, "billing", functions_dir=None, node_wait=timedelta(seconds=1))
    stopped_name = f"127.0.0.1:{cluster.servers[0].port}"
    engine.load(), engine.durability()  # what a consumer does at start, before any outage
    candidates, nodes = _events(client, 40, "o")
    early = next(e for e, n in zip(candidates, nodes) if n == stopped_name)
    late = next(e for e, n in zip(candidates, nodes) if n != stopped_name)
    log_key = late[2]
    os.kill(cluster.servers[0].process.pid, signal.SIGSTOP)
    try:
        results = engine.apply([early[:2], late[:2]], partial=True, order=["p0:key", "p0:key"])
        assert results[0].retry and results[1].retry and results[1].reason == "ordered", results
        assert client.get(log_key) is None  # the later event did not jump ahead
    finally:
        os.kill(cluster.servers[0].process.pid, signal.SIGCONT)
    deadline = time.monotonic() + 30
    while True:
        results = engine.apply([early[:2], late[:2]], partial=True, order=["p0:key", "p0:key"])
        if not any(r.retry for r in results) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert [r.outcome.value for r in results] in (["applied", "applied"], ["duplicate", "applied"]), results
    assert client.get(early[2]) == b"1" and client.get(log_key) == b"1"
    client.close()


def test_a_killed_master_s_events_go_to_the_replica_that_took_over_its_slots() -> None:
    """A master SIGKILLed, its replica promoted by the cluster: the events of its slots are applied
    on the promoted replica, without a restart, and the dead node is no longer waited for.

    Before: the engine routed by the slot map it had when the master went down and only PINGed the
    dead node, so its events came back as ``node-down`` retries forever (the cluster failover
    scenario's consumer never applied them)."""
    from tests.faults.redis_cluster_failover import CLUSTER_CONFIG

    nodes = RedisClusterProcesses(replicas=1, config=CLUSTER_CONFIG).start()
    client = redis.RedisCluster(host="127.0.0.1", port=nodes.servers[0].port, socket_timeout=2, socket_connect_timeout=1)
    try:
        engine = EffectsEngine(client, "billing", functions_dir=None, node_wait=timedelta(seconds=1))
        events, where = _events(client, 60, "a")
        assert all(r.applied for r in engine.apply([(e, fx) for e, fx, _ in events], partial=True))
        roles = nodes.roles()
        victim = next(port for port, of in roles.items() if of is None and f"127.0.0.1:{port}" in where)
        [replica] = [port for port, of in roles.items() if of == victim]
        nodes.node(victim).kill()
        later, _ = _events(client, 60, "b")
        deadline = time.monotonic() + 60
        while True:
            results = engine.apply([(e, fx) for e, fx, _ in later], partial=True)
            if not any(r.retry for r in results) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert not any(r.retry for r in results), [r for r in results if r.retry][:2]
        assert nodes.roles(nodes.node(replica))[replica] is None  # the replica serves the slots now
        assert all(client.get(key) == b"1" for _, _, key in events + later)
    finally:
        client.close()
        nodes.stop()
