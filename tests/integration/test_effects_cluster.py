"""The effects engine on a real 3-master Redis Cluster (Debian's redis-server, started here)."""

from __future__ import annotations

import uuid

import pytest

from postbox.effects import EffectsEngine, Effects, aggregate_keys, check_durability, key_slot
from tests.integration.conftest_effects import FUNCTIONS_DIR, redis_cluster  # noqa: F401 - fixture

pytestmark = pytest.mark.integration


def test_events_route_to_their_slots_nodes_once_each(redis_cluster) -> None:
    client = redis_cluster.client()
    engine = EffectsEngine(client, "billing", functions_dir=FUNCTIONS_DIR)
    assert engine.cluster and engine.strict_slots and engine.layout.slot_aligned
    events = []
    for n in range(60):
        k = aggregate_keys("order", f"{n}-{uuid.uuid4().hex[:6]}")
        fx = Effects().hset(k("state"), {"n": n}).hincrby(k("totals"), "paid", 5).xadd(k("log"), {"n": n}, maxlen=100)
        fx.call("hset_then_incrby", keys=[k("fn"), k("count")], args=["f", "v", 1])
        events.append((str(uuid.uuid4()), fx, k))
    nodes = {client.get_node_from_key(k("state")).name for _, _, k in events}
    assert len(nodes) == 3  # the batch really spans the three masters
    results = engine.apply([(e, fx) for e, fx, _ in events])
    assert all(r.applied for r in results), [r for r in results if not r.applied][:3]
    again = engine.apply([(e, fx) for e, fx, _ in events])
    assert all(r.duplicate for r in again)
    for e, fx, k in events:
        assert client.hget(k("totals"), "paid") == b"5"
        assert client.get(k("count")) == b"1"
        marker = engine.marker_key(e, fx)
        assert key_slot(marker) == key_slot(k("state")) and client.exists(marker)
    client.close()


def test_failure_is_undone_and_recorded_in_the_events_slot(redis_cluster) -> None:
    client = redis_cluster.client()
    engine = EffectsEngine(client, "billing", functions_dir=FUNCTIONS_DIR)
    k = aggregate_keys("order", uuid.uuid4().hex)
    client.set(k("str"), "x")
    fx = Effects().hset(k("state"), "s", "paid").sadd(k("str"), "boom")
    event = str(uuid.uuid4())
    result = engine.apply_one(event, fx)
    assert result.failed and result.command_index == 1 and result.error.startswith("WRONGTYPE")
    assert not client.exists(k("state"))
    stream = engine.failures_key(event, fx)
    assert key_slot(stream) == key_slot(k("state"))
    assert client.xrange(stream)[-1][1][b"event"] == event.encode()
    client.close()


def test_mixed_slot_effect_is_refused_with_keys_and_slots(redis_cluster) -> None:
    client = redis_cluster.client()
    engine = EffectsEngine(client, "billing", functions_dir=FUNCTIONS_DIR)
    a, b = f"order:{uuid.uuid4().hex}:state", f"customer:{uuid.uuid4().hex}:orders"
    good = aggregate_keys("order", "fine")
    fx = Effects().hset(a, "s", "paid").sadd(b, "o1")
    results = engine.apply([(str(uuid.uuid4()), fx), (str(uuid.uuid4()), Effects().incrby(good("n"), 1))])
    bad, ok = results
    assert bad.failed and bad.cross_slot
    assert f"'{a}' → slot {key_slot(a)}" in bad.error and f"'{b}' → slot {key_slot(b)}" in bad.error
    assert "hash tag" in bad.error
    assert ok.applied
    assert not client.exists(a) and not client.exists(b)
    client.close()


def test_script_cache_flush_on_one_node_is_absorbed(redis_cluster) -> None:
    client = redis_cluster.client()
    engine = EffectsEngine(client, "billing", functions_dir=None)
    keys = [aggregate_keys("order", uuid.uuid4().hex) for _ in range(20)]
    assert all(r.applied for r in engine.apply([(str(uuid.uuid4()), Effects().incrby(k("n"), 1)) for k in keys]))
    for server in redis_cluster.servers:
        server.client().script_flush()
    assert all(r.applied for r in engine.apply([(str(uuid.uuid4()), Effects().incrby(k("n"), 1)) for k in keys]))
    assert {client.get(k("n")) for k in keys} == {b"2"}
    client.close()


def test_cluster_durability_checks_every_primary(redis_cluster) -> None:
    client = redis_cluster.client()
    verdict = check_durability(client)
    assert verdict.durable and "3 primaries" in verdict.reason
    client.close()
