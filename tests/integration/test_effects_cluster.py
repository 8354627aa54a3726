"""The effects engine on a real 3-master Redis Cluster (Debian's redis-server, started here)."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
import redis

from postbox.effects import EffectsEngine, Effects, EventRef, TransientEffectError, aggregate_keys, check_durability, key_slot
from tests.integration.conftest_effects import FUNCTIONS_DIR, redis_cluster  # noqa: F401 - fixture

pytestmark = pytest.mark.integration


def test_events_route_to_their_slots_nodes_once_each(redis_cluster) -> None:
    client = redis_cluster.client()
    engine = EffectsEngine(client, "billing", functions_dir=FUNCTIONS_DIR)
    assert engine.cluster and engine.strict_slots and engine.layout.slot_aligned
    events = []
    for n in range(60):
        agg = f"{n}-{uuid.uuid4().hex[:6]}"
        k = aggregate_keys("order", agg)
        fx = Effects().hset(k("state"), {"n": n}).hincrby(k("totals"), "paid", 5).xadd(k("log"), {"n": n}, maxlen=100)
        fx.call("hset_then_incrby", keys=[k("fn"), k("count")], args=["f", "v", 1])
        events.append((EventRef.for_aggregate(str(uuid.uuid4()), "order", agg), fx, k))
    nodes = {client.get_node_from_key(k("state")).name for _, _, k in events}
    assert len(nodes) == 3  # the batch really spans the three masters
    results = engine.apply([(e, fx) for e, fx, _ in events])
    assert all(r.applied for r in results), [r for r in results if not r.applied][:3]
    again = engine.apply([(e, fx) for e, fx, _ in events])
    assert all(r.duplicate for r in again)
    for e, _fx, k in events:
        assert client.hget(k("totals"), "paid") == b"5"
        assert client.get(k("count")) == b"1"
        marker = engine.marker_key(e)
        assert key_slot(marker) == key_slot(k("state")) and client.exists(marker)
    client.close()


def test_failure_is_undone_and_recorded_in_the_events_slot(redis_cluster) -> None:
    client = redis_cluster.client()
    engine = EffectsEngine(client, "billing", functions_dir=FUNCTIONS_DIR)
    agg = uuid.uuid4().hex
    k = aggregate_keys("order", agg)
    client.set(k("str"), "x")
    fx = Effects().hset(k("state"), "s", "paid").sadd(k("str"), "boom")
    event = EventRef.for_aggregate(str(uuid.uuid4()), "order", agg)
    result = engine.apply_one(event, fx)
    assert result.failed and result.command_index == 1 and result.error.startswith("WRONGTYPE")
    assert not client.exists(k("state"))
    stream = engine.failures_key(event)
    assert key_slot(stream) == key_slot(k("state"))
    assert client.xrange(stream)[-1][1][b"event"] == event.id.encode()
    client.close()


def test_mixed_slot_effect_is_refused_with_keys_and_slots(redis_cluster) -> None:
    client = redis_cluster.client()
    engine = EffectsEngine(client, "billing", functions_dir=FUNCTIONS_DIR)
    a, b = f"order:{uuid.uuid4().hex}:state", f"customer:{uuid.uuid4().hex}:orders"
    good = aggregate_keys("order", "fine")
    fx = Effects().hset(a, "s", "paid").sadd(b, "o1")
    routed = EventRef.routed(str(uuid.uuid4()), a)  # the event's slot is a's: b lies outside it
    results = engine.apply([(routed, fx), (EventRef.for_aggregate(str(uuid.uuid4()), "order", "fine"), Effects().incrby(good("n"), 1))])
    bad, ok = results
    assert bad.failed and bad.cross_slot
    assert f"'{b}' → slot {key_slot(b)}" in bad.error and f"expected slot {key_slot(a)}" in bad.error
    assert "hash tag" in bad.error
    assert ok.applied
    assert not client.exists(a) and not client.exists(b)
    client.close()


def test_script_cache_flush_on_one_node_is_absorbed(redis_cluster) -> None:
    client = redis_cluster.client()
    engine = EffectsEngine(client, "billing", functions_dir=None)
    aggs = [uuid.uuid4().hex for _ in range(20)]
    keys = [aggregate_keys("order", a) for a in aggs]
    refs = lambda: [EventRef.for_aggregate(str(uuid.uuid4()), "order", a) for a in aggs]  # noqa: E731
    assert all(r.applied for r in engine.apply([(r, Effects().incrby(k("n"), 1)) for r, k in zip(refs(), keys)]))
    for server in redis_cluster.servers:
        server.client().script_flush()
    assert all(r.applied for r in engine.apply([(r, Effects().incrby(k("n"), 1)) for r, k in zip(refs(), keys)]))
    assert {client.get(k("n")) for k in keys} == {b"2"}
    client.close()


def test_the_marker_check_before_a_dead_letter_asks_each_markers_node(redis_cluster) -> None:
    """``already_applied`` (a handler failure's marker check) on events spread over the three
    masters: each answered by its slot's node, in input order."""
    client = redis_cluster.client()
    engine = EffectsEngine(client, "billing", functions_dir=None)
    refs = [EventRef.for_aggregate(str(uuid.uuid4()), "order", f"{n}-{uuid.uuid4().hex[:6]}") for n in range(30)]
    assert len({client.get_node_from_key(engine.marker_key(r)).name for r in refs}) == 3
    applied = refs[::2]
    assert all(r.applied for r in engine.apply([(r, Effects().incrby(f"{{{r.tag}}}:n", 1)) for r in applied]))
    assert engine.already_applied(refs) == [n % 2 == 0 for n in range(len(refs))]
    client.close()


def test_cluster_durability_checks_every_primary(redis_cluster) -> None:
    client = redis_cluster.client()
    verdict = check_durability(client)
    assert verdict.durable and "3 primaries" in verdict.reason
    client.close()


def test_legacy_marker_is_read_when_in_the_events_slot_only(redis_cluster) -> None:
    """Upgrade on a cluster (#12.1): one call reaches one slot, so a legacy marker is checked only
    when it lies in the event's slot (documented limit); the event id's slot is another one."""
    client = redis_cluster.client()
    agg = uuid.uuid4().hex[:10]
    k = aggregate_keys("order", agg)
    in_slot, elsewhere = str(uuid.uuid4()), str(uuid.uuid4())
    # written by the previous version: group 'billing:eu' unescaped, tag of the first key / the event id
    client.set(f"postbox:{{order:{agg}}}:seen:billing:eu:{in_slot}", "1", px=600_000)
    client.set(f"postbox:{{{elsewhere}}}:seen:billing:eu:{elsewhere}", "1", px=600_000)
    engine = EffectsEngine(client, "billing:eu", functions_dir=None)
    assert engine.apply_one(EventRef.for_aggregate(in_slot, "order", agg), Effects().incrby(k("n"), 1)).duplicate
    assert engine.apply_one(EventRef.for_aggregate(elsewhere, "order", agg), Effects()).applied
    assert client.get(k("n")) is None
    client.close()


def _node_clients(client, key: str):
    """(source node client, another primary's client, their node ids) for the slot of ``key``."""
    src = client.get_node_from_key(key)
    dst = next(n for n in client.get_primaries() if n.name != src.name)
    s_cli, d_cli = client.get_redis_connection(src), client.get_redis_connection(dst)
    return s_cli, d_cli, dst, s_cli.execute_command("CLUSTER", "MYID").decode(), d_cli.execute_command("CLUSTER", "MYID").decode()


def test_ask_during_a_slot_migration_is_answered_with_asking(redis_cluster) -> None:
    """#12.15: slot S MIGRATING on its owner, IMPORTING on another primary (CLUSTER SETSLOT), every
    key of S moved with MIGRATE. The owner answers ASK; the engine sends ASKING + the call to the
    named node, which serves it: a redelivery is a duplicate there, without waiting for the end of
    the migration. (Before: ASK was answered with a slot-map refresh, which still names the owner,
    so the call bounced until it gave up — TransientEffectError 'retries' — for the whole migration.)
    A call with a key the target does not have yet (a new event: its marker) gets TRYAGAIN from
    Redis, for any multi-key command during a migration: transient, applied once the slot is moved."""
    client = redis_cluster.client()
    engine = EffectsEngine(client, "billing", functions_dir=None)
    agg = uuid.uuid4().hex
    k = aggregate_keys("order", agg)
    client.set(k("str"), "x")
    assert engine.apply_one(EventRef.for_aggregate(str(uuid.uuid4()), "order", agg), Effects().sadd(k("str"), "m")).failed  # the failure stream exists
    ref = EventRef.for_aggregate(str(uuid.uuid4()), "order", agg)
    assert engine.apply_one(ref, Effects().incrby(k("n"), 1)).applied
    slot = key_slot(k("n"))
    s_cli, d_cli, dst, sid, did = _node_clients(client, k("n"))
    d_cli.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", sid)
    s_cli.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", did)
    try:
        keys = s_cli.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100)
        assert len(keys) == 5  # the failed event's verdict, marker, counter, string, failure stream
        s_cli.execute_command("MIGRATE", dst.host, dst.port, "", 0, 5000, "KEYS", *keys)
        with pytest.raises(redis.exceptions.AskError):
            s_cli.evalsha(engine.load(), 1, k("n"), "x")  # the owner really answers ASK now
        assert engine.apply_one(ref, Effects().incrby(k("n"), 1)).duplicate
        with pytest.raises(TransientEffectError) as moving:
            engine.apply_one(EventRef.for_aggregate(str(uuid.uuid4()), "order", agg), Effects().incrby(k("n"), 1))
        assert moving.value.reason == "TRYAGAIN"
    finally:
        for node in (s_cli, d_cli):
            node.execute_command("CLUSTER", "SETSLOT", slot, "NODE", did)
    client.nodes_manager.initialize()
    assert engine.apply_one(EventRef.for_aggregate(str(uuid.uuid4()), "order", agg), Effects().incrby(k("n"), 1)).applied
    assert client.get(k("n")) == b"2"
    client.close()


def test_script_kill_by_an_operator_is_transient(redis_cluster, tmp_path) -> None:
    """#12.15: an operator's SCRIPT KILL of a long-running apply (a user function spinning without
    writing) is an error reply 'Script killed by user': transient, retried — not an engine error
    that stops the consumer. Redis kills only scripts that wrote nothing, so a retry is safe."""
    (tmp_path / "spin.lua").write_text(
        "local t = tonumber(redis.call('TIME')[1]) + 30\n"
        "while tonumber(redis.call('TIME')[1]) < t do redis.call('EXISTS', KEYS[1]) end\nreturn 1\n"
    )
    client = redis_cluster.client()
    engine = EffectsEngine(client, "billing", functions_dir=tmp_path)
    engine.load()
    agg = uuid.uuid4().hex
    k = aggregate_keys("order", agg)
    node = client.get_redis_connection(client.get_node_from_key(k("n")))
    node.config_set("busy-reply-threshold", "50")
    outcome: dict[str, BaseException] = {}

    def apply() -> None:
        try:
            engine.apply_one(EventRef.for_aggregate(str(uuid.uuid4()), "order", agg), Effects().call("spin", keys=[k("s")]).incrby(k("n"), 1))
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome["error"] = exc

    worker = threading.Thread(target=apply)
    worker.start()
    operator = redis.Redis(host=node.connection_pool.connection_kwargs["host"], port=node.connection_pool.connection_kwargs["port"])
    try:
        for _ in range(600):  # bounded: until the script passed the busy threshold
            try:
                operator.ping()
            except redis.ResponseError as exc:
                assert str(exc).startswith("BUSY"), exc
                break
            time.sleep(0.05)
        assert operator.script_kill()
        worker.join(30)
    finally:
        operator.close()
    error = outcome.get("error")
    assert isinstance(error, TransientEffectError) and error.reason == "SCRIPT_KILLED", repr(error)
    assert client.get(k("n")) is None  # the killed call wrote nothing
    assert engine.apply_one(EventRef.for_aggregate(str(uuid.uuid4()), "order", agg), Effects().incrby(k("n"), 1)).applied
    client.close()


def test_an_order_key_over_two_slots_of_one_master_is_applied_in_order(redis_cluster) -> None:
    """A handler that routes one order's events to two slots (its own tag, then a ledger's) living
    on the same master: MONITOR on that master shows them applied in input order. Before the fix
    the wave plan put all of them in one wave, and the master ran them lane by lane: e0 e2, e1."""
    client = redis_cluster.client()
    engine = EffectsEngine(client, "billing", functions_dir=FUNCTIONS_DIR)
    first = f"order:{uuid.uuid4().hex[:8]}"
    node = client.get_node_from_key(f"{{{first}}}").name
    second = next(tag for tag in (f"ledger:{n}" for n in range(10_000))
                  if key_slot(f"{{{tag}}}") != key_slot(f"{{{first}}}") and client.get_node_from_key(f"{{{tag}}}").name == node)
    tags = [first, second, first, second]
    events = [(EventRef(str(uuid.uuid4()), tag), Effects().rpush(f"{{{tag}}}:log", str(n))) for n, tag in enumerate(tags)]
    master = redis.Redis(host=node.split(":")[0], port=int(node.split(":")[1]))
    seen: list[str] = []
    ids = {e.id for e, _ in events}
    with master.monitor() as monitor:
        def watch() -> None:
            for command in monitor.listen():
                text = command["command"]
                if text.startswith("SET ") and ":seen:" in text:  # the marker, written inside the apply script
                    seen.extend(i for i in ids if i in text)
                if len(seen) >= len(ids):
                    return
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        time.sleep(0.2)
        results = engine.apply(events, order=["k42"] * len(events))
        watcher.join(10)
    assert all(r.applied for r in results)
    assert seen == [e.id for e, _ in events], "applied out of the order key's order"
    master.close()
    client.close()
