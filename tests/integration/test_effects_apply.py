"""The effects engine against a real redis-server: dedupe, undo, failures, injection, restarts, OOM."""

from __future__ import annotations

import uuid

import pytest
import redis

from postbox.effects import (
    CrossSlotEffectError,
    Effects,
    EffectsEngine,
    Outcome,
    PermanentEffectError,
    TransientEffectError,
    check_durability,
)
from postbox.errors import EffectConfigError, EffectEngineError
from postbox.effects.keys import ReplayRef
from tests.integration.conftest_effects import (  # noqa: F401 - fixtures
    FUNCTIONS_DIR,
    engine,
    ref,
    fresh_redis,
    own_client,
    own_redis,
    tag,
)

pytestmark = pytest.mark.integration


def test_same_event_twice_applies_once(engine: EffectsEngine, own_client: redis.Redis, tag: str) -> None:
    fx = Effects().hincrby(f"{tag}:totals", "paid", 500).sadd(f"{tag}:seen", "a").xadd(f"{tag}:log", {"k": "v"})
    event = ref(tag)
    first = engine.apply_one(event, fx)
    second = engine.apply_one(event, fx)
    assert first.outcome is Outcome.APPLIED and first.applied
    assert second.outcome is Outcome.DUPLICATE and second.duplicate
    assert own_client.hget(f"{tag}:totals", "paid") == b"500"
    assert own_client.xlen(f"{tag}:log") == 1
    marker = engine.marker_key(event)
    assert own_client.get(marker) == b"1"
    assert 0 < own_client.pttl(marker) <= engine.marker_ttl_ms


def test_duplicates_inside_one_batch_and_per_group(own_client: redis.Redis, tag: str) -> None:
    fx = Effects().incrby(f"{tag}:n", 1)
    event = ref(tag)
    billing = EffectsEngine(own_client, "billing-" + tag, functions_dir=None)
    shipping = EffectsEngine(own_client, "shipping-" + tag, functions_dir=None)
    outcomes = [r.outcome for r in billing.apply([(event, fx), (event, fx), (ref(tag), fx)])]
    assert outcomes == [Outcome.APPLIED, Outcome.DUPLICATE, Outcome.APPLIED]
    assert shipping.apply_one(event, fx).applied  # another group applies it once for itself
    assert own_client.get(f"{tag}:n") == b"3"


def test_failure_undoes_the_event_records_it_and_batch_continues(
    engine: EffectsEngine, own_client: redis.Redis, tag: str
) -> None:
    own_client.hset(f"{tag}:h", mapping={"a": "1", "b": "2"})
    own_client.pexpire(f"{tag}:h", 600_000)
    own_client.set(f"{tag}:str", "text")
    own_client.sadd(f"{tag}:s", "old")
    before_ttl = own_client.pexpiretime(f"{tag}:h")
    bad = (
        Effects()
        .hset(f"{tag}:h", {"a": "changed", "new": "x"})
        .hdel(f"{tag}:h", "b")
        .sadd(f"{tag}:s", "old", "added")
        .set(f"{tag}:other", "v")
        .incrby(f"{tag}:str", 1)  # ERR value is not an integer
        .sadd(f"{tag}:never", "x")
    )
    good = Effects().sadd(f"{tag}:s", "later")
    failed_id, good_id = ref(tag), ref(tag)
    failed, ok = engine.apply([(failed_id, bad), (good_id, good)])
    assert failed.failed and failed.error_class == "permanent"
    assert (failed.command_index, failed.op) == (4, "incrby")
    assert "not an integer" in failed.error
    assert ok.applied
    assert own_client.hgetall(f"{tag}:h") == {b"a": b"1", b"b": b"2"}
    assert own_client.pexpiretime(f"{tag}:h") == before_ttl
    assert own_client.smembers(f"{tag}:s") == {b"old", b"later"}
    assert not own_client.exists(f"{tag}:other", f"{tag}:never")
    assert own_client.get(engine.marker_key(failed_id)).startswith(b"Feffect\n4\nincrby\n")  # its verdict, not "1"
    assert own_client.pttl(engine.marker_key(failed_id)) > 0
    records = own_client.xrange(engine.failures_key(failed_id))
    assert records[-1][1] == {
        b"event": failed_id.id.encode(),
        b"group": engine.group.encode(),
        b"command_index": b"4",
        b"op": b"incrby",
        b"error": failed.error.encode(),
    }
    with pytest.raises(PermanentEffectError, match="command 4"):
        failed.raise_for_failure()


def test_an_event_without_effects_is_marked(engine: EffectsEngine, own_client: redis.Redis, tag: str) -> None:
    event = ref(tag)
    assert engine.apply_one(event, Effects()).applied
    assert engine.apply_one(event, Effects()).duplicate
    assert own_client.exists(engine.marker_key(event))


def test_a_failed_event_is_failed_earlier_for_a_redelivery_and_applies_as_a_replayed_copy(engine: EffectsEngine, own_client: redis.Redis, tag: str) -> None:
    """Its verdict binds a redelivery (nothing runs, even once what it met is fixed: it would apply
    after the events that followed it); a copy sent on purpose (dlq replay) runs and applies."""
    own_client.set(f"{tag}:k", "string")
    fx = Effects().sadd(f"{tag}:k", "m")
    event = ref(tag)
    assert engine.apply_one(event, fx).failed
    own_client.delete(f"{tag}:k")
    again = engine.apply_one(event, fx)
    assert again.failed and again.earlier is not None and again.error_class == "EffectFailed:WRONGTYPE"
    assert "WRONGTYPE" in again.error and not own_client.exists(f"{tag}:k")
    assert engine.apply_one(ReplayRef.of(event), fx).applied
    assert own_client.smembers(f"{tag}:k") == {b"m"} and own_client.get(engine.marker_key(event)) == b"1"
    assert engine.apply_one(ReplayRef.of(event), fx).duplicate  # an applied event's marker still holds for a copy


INJECTIONS = [
    "it's \"quoted\"",
    "]]",
    "]==]",
    "end; redis.call('FLUSHALL'); --",
    "return redis.call('SET', 'pwned', 1)",
    "\r\n*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$1\r\ny\r\n",
    "%s %d %%",
    "{}",
    "",
]
BINARY = [b"\x00", b"a\x00b", b"\xff\xfe\x80", bytes(range(256))]


def test_injection_strings_are_stored_verbatim(engine: EffectsEngine, own_client: redis.Redis, tag: str) -> None:
    values: list[str | bytes] = [*INJECTIONS, *BINARY]
    fx = Effects()
    for i, v in enumerate(values):
        raw = v.encode() if isinstance(v, str) else v
        key = f"{tag}:".encode() + raw + f":{i}".encode()
        fx.set(key, v)
        fx.hset(f"{tag}:h", raw + f"#{i}".encode(), v)
        fx.sadd(f"{tag}:s", v) if raw else None
        fx.zadd(f"{tag}:z", {raw + f"#{i}".encode(): i})
        fx.rpush(f"{tag}:l", v)
    fx.xadd(f"{tag}:x", {raw + b"f": raw for raw in (v.encode() if isinstance(v, str) else v for v in values) if raw})
    fx.call("hset_then_incrby", keys=[f"{tag}:fh", f"{tag}:fc"], args=["]] -- \x00", "\r\n'\"", 7])
    assert engine.apply_one(ref(tag), fx).applied
    for i, v in enumerate(values):
        raw = v.encode() if isinstance(v, str) else v
        assert own_client.get(f"{tag}:".encode() + raw + f":{i}".encode()) == raw
        assert own_client.hget(f"{tag}:h", raw + f"#{i}".encode()) == raw
        assert own_client.zscore(f"{tag}:z", raw + f"#{i}".encode()) == i
    assert own_client.lrange(f"{tag}:l", 0, -1) == [v.encode() if isinstance(v, str) else v for v in values]
    assert own_client.smembers(f"{tag}:s") == {v.encode() if isinstance(v, str) else v for v in values} - {b""}
    assert own_client.hgetall(f"{tag}:fh") == {"]] -- \x00".encode(): "\r\n'\"".encode()}
    assert own_client.get(f"{tag}:fc") == b"7"
    assert not own_client.exists("pwned")


def test_injection_in_group_and_event_id(own_client: redis.Redis, tag: str) -> None:
    group = "g]] '\" \r\n" + tag
    engine = EffectsEngine(own_client, group, functions_dir=None)
    event = ref(tag, "ev]]\r\n\x00'" + tag)
    fx = Effects().incrby(f"{tag}:n", 1)
    assert engine.apply_one(event, fx).applied
    assert engine.apply_one(event, fx).duplicate
    assert own_client.get(engine.marker_key(event)) == b"1"


def test_user_function_applies_and_partial_failure_is_undone(engine: EffectsEngine, own_client: redis.Redis, tag: str) -> None:
    assert engine.apply_one(ref(tag), Effects().call("hset_then_incrby", keys=[f"{tag}:h", f"{tag}:c"], args=["f", "v", 2])).applied
    assert own_client.hgetall(f"{tag}:h") == {b"f": b"v"} and own_client.get(f"{tag}:c") == b"2"
    own_client.set(f"{tag}:bad", "x")
    own_client.pexpire(f"{tag}:h", 500_000)
    at = own_client.pexpiretime(f"{tag}:h")
    result = engine.apply_one(
        ref(tag), Effects().call("hset_then_incrby", keys=[f"{tag}:h", f"{tag}:bad"], args=["g", "w", 1])
    )
    assert result.failed and result.op == "call" and "not an integer" in result.error
    assert own_client.hgetall(f"{tag}:h") == {b"f": b"v"}
    assert own_client.pexpiretime(f"{tag}:h") == at
    assert own_client.get(f"{tag}:bad") == b"x"


def test_user_function_refusal_and_runtime_error(engine: EffectsEngine, own_client: redis.Redis, tag: str) -> None:
    own_client.hset(f"{tag}:stock", "sku", 1)
    short = engine.apply_one(
        ref(tag), Effects().hset(f"{tag}:order", "state", "reserved").call("reserve", keys=[f"{tag}:stock"], args=["sku", 5])
    )
    assert short.failed and short.error.startswith("SHORT only 1 of sku")
    assert not own_client.exists(f"{tag}:order")
    broken = engine.apply_one(ref(tag), Effects().call("broken_runtime", keys=[f"{tag}:x"]))
    assert broken.failed
    assert "broken_runtime.lua:3" in broken.error and "nil value" in broken.error


def test_unknown_function_is_a_configuration_error_before_sending(engine: EffectsEngine, own_client: redis.Redis, tag: str) -> None:
    """#12.9: a missing consumers/lua file fails every event alike: stop, dead-letter nothing."""
    with pytest.raises(EffectConfigError, match="no_such_function") as refused:
        engine.apply([(ref(tag), Effects().incrby(f"{tag}:n", 1)), (ref(tag), Effects().call("no_such_function", keys=[f"{tag}:k"]))])
    assert "hset_then_incrby" in str(refused.value) and refused.value.fix  # names the known functions and the fix
    assert not own_client.exists(f"{tag}:n")  # refused before sending: nothing of the batch ran


def test_mixed_slots_refused_with_keys_and_slots_named(engine: EffectsEngine, own_client: redis.Redis, tag: str) -> None:
    fx = Effects().set("user:1", "a").set("user:2", "b")
    result = engine.apply_one(ref(tag), fx)
    assert result.failed and result.cross_slot
    assert "'user:1' → slot" in result.error and "'user:2' → slot" in result.error and "hash tag" in result.error
    assert not own_client.exists("user:1", "user:2")
    with pytest.raises(CrossSlotEffectError):
        result.raise_for_failure()


def test_xadd_trim_is_deferred_and_stream_counters_restored(engine: EffectsEngine, own_client: redis.Redis, tag: str) -> None:
    stream = f"{tag}:x"
    for i in range(300):
        own_client.xadd(stream, {"i": i}, id=f"{i + 1}-0")
    own_client.xdel(stream, "5-0")
    info = own_client.xinfo_stream(stream)
    own_client.set(f"{tag}:s", "x")
    failed = engine.apply_one(ref(tag), Effects().xadd(stream, {"new": 1}, maxlen=10).sadd(f"{tag}:s", "m"))
    assert failed.failed
    after = own_client.xinfo_stream(stream)
    for field in ("length", "last-generated-id", "max-deleted-entry-id", "entries-added"):
        assert after[field] == info[field], field
    assert engine.apply_one(ref(tag), Effects().xadd(stream, {"new": 1}, maxlen=10)).applied
    assert own_client.xlen(stream) < 300  # the approximate trim ran after success


def test_large_batch_is_split_into_bounded_calls(own_client: redis.Redis, tag: str) -> None:
    engine = EffectsEngine(own_client, "g" + tag, functions_dir=None, batch_size=7)
    events = [(ref(tag), Effects().sadd(f"{tag}:s", i).hincrby(f"{tag}:h", "n", 1)) for i in range(50)]
    results = engine.apply(events)
    assert all(r.applied for r in results) and [r.event_id for r in results] == [e.id for e, _ in events]
    assert own_client.scard(f"{tag}:s") == 50 and own_client.hget(f"{tag}:h", "n") == b"50"
    assert all(r.duplicate for r in engine.apply(events))


def test_restart_between_calls_is_absorbed(fresh_redis) -> None:
    client = fresh_redis.client()
    engine = EffectsEngine(client, "g", functions_dir=FUNCTIONS_DIR)
    fx = Effects().incrby("{r}:n", 1)
    first = ref("r")
    assert engine.apply_one(first, fx).applied
    fresh_redis.restart()  # script cache empty, data back from the AOF
    assert client.script_exists(engine.script.sha) == [False]
    assert engine.apply_one(first, fx).duplicate
    assert engine.apply_one(ref("r"), fx).applied
    assert client.get("{r}:n") == b"2"
    client.script_flush()
    assert engine.apply_one(ref("r"), fx.call("hset_then_incrby", keys=["{r}:h", "{r}:n"], args=["f", "v", 1])).applied
    client.close()


def test_oom_with_noeviction_is_transient_and_changes_nothing(fresh_redis) -> None:
    client = fresh_redis.client()
    engine = EffectsEngine(client, "g", functions_dir=None)
    engine.load()
    client.set("{o}:keep", "v")
    keys_before = client.dbsize()  # {o}:keep and the group registry load() published
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", str(used - 1024 * 64))
    try:
        with pytest.raises(TransientEffectError) as refused:
            engine.apply_one(ref("o"), Effects().set("{o}:new", "v").incrby("{o}:n", 1))
        assert refused.value.reason == "OOM"
        assert not client.exists("{o}:new", "{o}:n")
        assert client.dbsize() == keys_before
    finally:
        client.config_set("maxmemory", "0")
    assert engine.apply_one(ref("o"), Effects().set("{o}:new", "v")).applied
    client.close()


def test_a_later_call_of_a_split_batch_refused_leaves_the_earlier_calls_reported_applied(fresh_redis, tmp_path) -> None:
    """#14.2: a batch split over calls (more events than batch_size) whose second call Redis refuses
    (maxmemory reached by the first call's writes: OOM before the script's first line). With
    partial=True the first call's events come back APPLIED and every later one RETRY with nothing
    of it written; without partial the refusal is raised, and applying the same batch again applies
    the rest once (the first call's events are duplicates). The calls of one lane stay in order:
    no later call runs after an earlier one was refused."""
    (tmp_path / "grow.lua").write_text("return redis.call('SET', KEYS[1], string.rep('x', tonumber(ARGV[1])))\n")
    client = fresh_redis.client()
    engine = EffectsEngine(client, "g", functions_dir=tmp_path, batch_size=2)
    engine.load()
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", str(used + 1024 * 1024))
    # the first call writes 4 MB from a few bytes of arguments: past maxmemory once it has run
    events = [(ref("o"), Effects().call("grow", keys=["{o}:big"], args=[4_000_000]))]
    events += [(ref("o"), Effects().incrby("{o}:n", 1)) for _ in range(5)]
    try:
        results = engine.apply(events, partial=True)
        assert [r.outcome for r in results] == [Outcome.APPLIED] * 2 + [Outcome.RETRY] * 4
        assert {r.reason for r in results[2:]} == {"OOM"}
        assert client.get("{o}:n") == b"1" and not any(client.exists(engine.marker_key(e)) for e, _ in events[2:])
        with pytest.raises(TransientEffectError) as refused:
            engine.apply(events)
        assert refused.value.reason == "OOM"
    finally:
        client.config_set("maxmemory", "0")
    assert [r.outcome for r in engine.apply(events)] == [Outcome.DUPLICATE] * 2 + [Outcome.APPLIED] * 4
    assert client.get("{o}:n") == b"5"
    client.close()


def test_busy_server_is_transient(fresh_redis) -> None:
    """Another client's script runs past busy-reply-threshold: BUSY, transient. The spinning script
    runs until the test kills it (SCRIPT KILL: it wrote nothing), so the BUSY window cannot close
    before the engine's call on a loaded machine."""
    import threading
    import time

    client = fresh_redis.client()
    engine = EffectsEngine(client, "g", functions_dir=None)
    engine.load()
    client.config_set("busy-reply-threshold", "50")
    other = fresh_redis.client()

    def spin() -> None:
        with pytest.raises(redis.ResponseError, match="killed"):
            other.eval("local t = redis.call('TIME')[1] + 60; while tonumber(redis.call('TIME')[1]) < t do end", 0)

    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        for _ in range(600):  # bounded: wait for the script to pass the busy threshold
            try:
                client.ping()
                time.sleep(0.02)
            except redis.ResponseError:
                break
        with pytest.raises(TransientEffectError) as refused:
            engine.apply_one(ref("b"), Effects().incrby("{b}:n", 1))
        assert refused.value.reason == "BUSY"
    finally:
        client.script_kill()
        spinner.join(timeout=30)
        other.close()
    assert engine.apply_one(ref("b"), Effects().incrby("{b}:n", 1)).applied
    client.close()


def test_connection_refused_is_transient() -> None:
    from tests.support.redis_servers import free_port

    client = redis.Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=0.2, retry_on_error=[], retry=None)
    engine = EffectsEngine(client, "g", functions_dir=None)
    with pytest.raises(TransientEffectError) as refused:
        engine.apply_one(ref("c"), Effects().incrby("{c}:n", 1))
    assert refused.value.reason == "connection"


def test_durability_reported_from_server_config(fresh_redis) -> None:
    client = fresh_redis.client()
    assert check_durability(client).durable and check_durability(client).method == "appendfsync-always"
    client.config_set("appendfsync", "everysec")
    verdict = check_durability(client)
    from postbox.effects.durability import has_waitaof

    if not has_waitaof(client):
        assert not verdict.durable and "WAITAOF" in verdict.reason
    else:
        assert verdict.durable and verdict.method == "waitaof"
    client.config_set("appendonly", "no")
    assert not check_durability(client).durable
    client.close()


def test_user_function_that_does_not_compile_is_named(own_client: redis.Redis, tmp_path) -> None:
    (tmp_path / "ok.lua").write_text("return 1\n")
    (tmp_path / "bad_syntax.lua").write_text("-- comment\nlocal x = = 1\n")
    engine = EffectsEngine(own_client, "g", functions_dir=tmp_path)
    with pytest.raises(EffectEngineError, match=r"bad_syntax\.lua:2"):
        engine.apply_one(ref("c"), Effects().call("ok", keys=["{c}:k"]))


@pytest.mark.parametrize("batch_size", [512, 2])
def test_a_mixed_batch_reports_every_event_by_its_own_shape(own_client: redis.Redis, tag: str, batch_size: int) -> None:
    """#14.2 (protocol 3: events packed by shape, replies as codes + failure details): one batch
    mixing shapes, legacy markers, duplicates and failures at different commands maps each reply
    back to its own event, in one call and split over several (batch_size 2). Shown to fail when
    the client does not advance through the failure details (every failure then reports the first
    one's command) or the script does not step past an event's legacy key."""
    group = "mixed-" + uuid.uuid4().hex[:8]
    engine = EffectsEngine(own_client, group, functions_dir=None, batch_size=batch_size)
    other = "{o" + uuid.uuid4().hex[:10] + "}"  # effects outside the routing tag: a distinct legacy marker
    own_client.set(f"{tag}:str", "text")
    first, bad_second, bad_first, routed, legacy_seen, last = (ref(tag) for _ in range(6))
    own_client.set(f"postbox:{other}:seen:{group}:{legacy_seen.id}", "1")  # marked before the upgrade
    events = [
        (first, Effects().hincrby(f"{tag}:h", "n", 2).sadd(f"{tag}:s", "a")),
        (bad_second, Effects().hset(f"{tag}:h", "x", "1").sadd(f"{tag}:str", "m").incrby(f"{tag}:n", 1)),
        (first, Effects().hincrby(f"{tag}:h", "n", 2)),  # the same event again: a duplicate
        (routed, Effects().rpush(f"{other}:l", "r")),
        (bad_first, Effects().incrby(f"{tag}:str", 1)),
        (legacy_seen, Effects().rpush(f"{other}:l", "never")),
        (last, Effects().xadd(f"{tag}:x", {"k": "v"})),
    ]
    results = engine.apply(events)
    assert [r.outcome for r in results] == [
        Outcome.APPLIED, Outcome.FAILED, Outcome.DUPLICATE, Outcome.APPLIED, Outcome.FAILED, Outcome.DUPLICATE, Outcome.APPLIED,
    ]  # fmt: skip
    assert [r.event_id for r in results] == [e.id for e, _ in events]
    assert (results[1].command_index, results[1].op) == (1, "sadd") and "WRONGTYPE" in results[1].error
    assert (results[4].command_index, results[4].op) == (0, "incrby") and "not an integer" in results[4].error
    assert own_client.hgetall(f"{tag}:h") == {b"n": b"2"}  # the failed event's HSET was undone
    assert own_client.get(f"{tag}:n") is None and own_client.lrange(f"{other}:l", 0, -1) == [b"r"]
    assert [own_client.get(engine.marker_key(e))[:1] for e in (first, bad_second, routed, bad_first, last)] == [
        b"1", b"F", b"1", b"F", b"1",
    ]  # fmt: skip
    recorded = own_client.xrange(engine.failures_key(first))
    assert [(f[b"event"].decode(), f[b"command_index"]) for _id, f in recorded] == [(bad_second.id, b"1"), (bad_first.id, b"0")]


@pytest.mark.parametrize("prior", [b"5", None])
def test_an_undone_incrby_keeps_the_keys_ttl(engine: EffectsEngine, own_client: redis.Redis, tag: str, prior: bytes | None) -> None:
    """A fixed example of the all-or-nothing property for INCRBY's undo: the counter had a TTL, a
    later command of the event fails (WRONGTYPE), the undo restores the value *and* the expiry (a
    SET without KEEPTTL strips it; a counter that did not exist is deleted again)."""
    counter, text = f"{tag}:n", f"{tag}:str"
    own_client.set(text, "not a set")
    if prior is not None:
        own_client.set(counter, prior, px=600_000)
    expiry = own_client.pexpiretime(counter)
    (result,) = engine.apply([(ref(tag), Effects().incrby(counter, 3).sadd(text, "m"))])
    assert result.outcome is Outcome.FAILED and result.error.startswith("WRONGTYPE")
    assert own_client.get(counter) == prior
    assert own_client.pexpiretime(counter) == expiry  # -2 (absent) stays -2; an absolute expiry is kept to the ms
