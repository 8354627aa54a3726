"""#12.9: permission and deployment errors stop the consumer; they never dead-letter in bulk.

Inside a user Lua effect function an ACL refusal (a command the consumer's Redis user may not run,
a key outside its patterns) or a missing ``consumers/lua`` file used to become an ordinary failed
event (``EffectFailed:ERR``): dead-lettered, and the partition moved on — every event of the stream
would follow it into the DLQ. They are configuration errors now: the engine raises
:class:`EffectConfigError`, the consumer exits 3 with the fix, nothing of the batch is committed,
nothing is dead-lettered. Data errors (WRONGTYPE) stay permanent per-event failures.

Against the stack's Redis as its ACL user ``postbox_consumer`` (the refusals are Redis's own).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import redis

from postbox.effects import EffectConfigError, Effects, EffectsEngine, EventRef, Outcome, aggregate_keys
from tests.support.consumers import ConsumerProcess, committed, create_topic, json_event, produce, read_all

pytestmark = pytest.mark.integration
FUNCTIONS = Path(__file__).resolve().parents[1] / "apps" / "config_lua"
NO_COMMIT = -1001


@pytest.fixture
def consumer_user(settings) -> redis.Redis:
    assert "postbox_consumer:" in settings.redis_url, "the stack's POSTBOX_REDIS_URL should be the ACL user"
    client = redis.Redis.from_url(settings.redis_url)
    yield client
    client.close()


@pytest.mark.parametrize(("function", "refusal"), [("outside_acl", "keys"), ("forbidden_command", "command")])
def test_acl_refusal_inside_a_lua_function_is_a_configuration_error(consumer_user, redis_client, unique, function, refusal) -> None:
    engine = EffectsEngine(consumer_user, f"cfg-{unique}", functions_dir=FUNCTIONS)
    k = aggregate_keys("cfg", unique)
    before, refused, after = (EventRef.for_aggregate(str(uuid.uuid4()), "cfg", unique) for _ in range(3))
    batch = [
        (before, Effects().incrby(k("n"), 1)),
        (refused, Effects().hset(k("h"), "g", "w").call(function, keys=[k("fn")], args=[unique])),
        (after, Effects().incrby(k("later"), 1)),
    ]
    with pytest.raises(EffectConfigError) as stopped:
        engine.apply(batch)
    message = str(stopped.value)
    assert f"event {refused.id}" in message and "deployment" in message and refusal in message.lower()
    assert "POSTBOX_REDIS_KEY_PATTERNS" in (stopped.value.fix or "")
    assert not redis_client.exists(k("h"), k("fn"), f"outside:{unique}")  # the refused event is undone
    assert not redis_client.exists(engine.marker_key(refused))
    assert not redis_client.exists(k("later"))  # the call stopped there: nothing after it ran
    recorded = redis_client.xrange(engine.failures_key(refused)) if redis_client.exists(engine.failures_key(refused)) else []
    assert not [f for _, f in recorded if f.get(b"event") == refused.id.encode()]  # not the event's failure
    redis_client.delete(k("n"), engine.marker_key(before))


def test_key_outside_the_acl_patterns_and_missing_function_file(consumer_user, redis_client, unique) -> None:
    engine = EffectsEngine(consumer_user, f"cfg-{unique}", functions_dir=FUNCTIONS)
    with pytest.raises(EffectConfigError, match="permission"):  # Redis refuses the EVALSHA's declared keys
        engine.apply_one(EventRef(str(uuid.uuid4()), f"outside:{unique}"), Effects().set(f"outside:{unique}", "x"))
    with pytest.raises(EffectConfigError, match="'not_deployed' has no file not_deployed.lua"):
        engine.apply_one(EventRef.for_aggregate(str(uuid.uuid4()), "cfg", unique), Effects().call("not_deployed", keys=[f"{{cfg:{unique}}}:k"]))
    assert not redis_client.exists(f"outside:{unique}")


def test_data_errors_stay_permanent_failures_of_their_event(consumer_user, redis_client, unique) -> None:
    engine = EffectsEngine(consumer_user, f"cfg-{unique}", functions_dir=FUNCTIONS)
    k = aggregate_keys("cfg", unique)
    redis_client.set(k("str"), "text")
    ref = EventRef.for_aggregate(str(uuid.uuid4()), "cfg", unique)
    failed, ok = engine.apply([(ref, Effects().sadd(k("str"), "m")), (EventRef.for_aggregate(str(uuid.uuid4()), "cfg", unique), Effects().incrby(k("n"), 1))])
    assert failed.outcome is Outcome.FAILED and failed.error.startswith("WRONGTYPE") and failed.error_class == "permanent"
    assert ok.applied
    redis_client.delete(k("str"), k("n"), engine.failures_key(ref))


@pytest.mark.parametrize("event_type", ["LuaOutsideAcl", "MissingFunction"])
def test_consumer_exits_3_committing_and_dead_lettering_nothing(settings, redis_client, unique, tmp_path, event_type) -> None:
    """A good event, the refused one, another good one: exit 3 naming the fix; no offset committed;
    nothing in the DLQ (before: the refused event was dead-lettered as EffectFailed:ERR / the
    missing function as a permanent failure, and the partition moved on)."""
    agg = f"cfg{unique}"
    topic, group = f"outbox.event.{agg}", f"test-cfg-{unique}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    produce(settings.kafka_bootstrap, topic, [
        json_event(agg, f"x{unique}", kind, seq, partition=0) for seq, kind in enumerate(["Counted", event_type, "Counted"])
    ])
    env = {"POSTBOX_REDIS_URL": settings.redis_url, "POSTBOX_KAFKA_BOOTSTRAP": settings.kafka_bootstrap, "POSTBOX_LUA_DIR": str(FUNCTIONS)}
    proc = ConsumerProcess("tests.apps.config_errors:app", env, tmp_path / "consumer.log",
                           ["--group", group, "--topics", topic, "--batch-wait-ms", "500"])
    try:
        code = proc.process.wait(timeout=90)
        out = proc.output()
        assert code == 3, out
        assert "effects engine error" in out and "fix:" in out, out
        assert committed(settings.kafka_bootstrap, group, topic, 1) == {0: NO_COMMIT}
        assert read_all(settings.kafka_bootstrap, f"{topic}.dlq", expect=1, timeout=3) == []
        assert not redis_client.exists(f"outside:x{unique}", f"{{{agg}:x{unique}}}:fn")
    finally:
        proc.close()
        redis_client.delete(f"{{{agg}:x{unique}}}:seq", f"{{{agg}:x{unique}}}:count")


@pytest.mark.parametrize("how", ["raise", "reply"])
@pytest.mark.parametrize("data", ["NOPERM sku-7", "sku can't run this command", "can't access at least one of the keys",
                                  "No permissions to ship", "not allowed from script"])  # fmt: skip
def test_a_functions_error_quoting_data_like_a_refusal_is_the_events_failure(consumer_user, redis_client, unique, data, how) -> None:
    """An out-of-stock error quoting a SKU that reads like Redis's refusal texts: a failure of its
    event (dead-lettered by the consumer), not a deployment error that stops the consumer on every
    restart (the script searched the whole failure text for those phrases)."""
    engine = EffectsEngine(consumer_user, f"cfg-{unique}", functions_dir=FUNCTIONS)
    k = aggregate_keys("cfg", unique)
    ref = EventRef.for_aggregate(str(uuid.uuid4()), "cfg", unique)
    after = EventRef.for_aggregate(str(uuid.uuid4()), "cfg", unique)
    failed, ok = engine.apply([(ref, Effects().call("quoting_data", keys=[k("fn")], args=[data, how])),
                               (after, Effects().incrby(k("n"), 1))])  # fmt: skip
    assert failed.outcome is Outcome.FAILED and f"out of stock: {data}" in failed.error
    assert ok.applied and not redis_client.exists(k("fn"))  # the failed event is undone
    redis_client.delete(k("n"), engine.failures_key(ref))


def test_a_refusal_the_function_hides_behind_its_own_message_is_still_the_deployments(consumer_user, redis_client, unique) -> None:
    engine = EffectsEngine(consumer_user, f"cfg-{unique}", functions_dir=FUNCTIONS)
    ref = EventRef.for_aggregate(str(uuid.uuid4()), "cfg", unique)
    with pytest.raises(EffectConfigError):
        engine.apply_one(ref, Effects().call("hides_refusal", keys=[f"{{cfg:{unique}}}:k"]))
    assert not redis_client.exists(engine.marker_key(ref))


def test_an_unexpected_error_reply_stops_instead_of_being_retried_for_ever() -> None:
    """A server that answers the apply with an error the engine does not know (here EVALSHA
    renamed away, as some managed offerings do with commands) is not a transient refusal: retrying
    cannot fix it, so the engine raises EffectEngineError (the consumer stops with it) and
    nothing of the event was written."""
    from postbox.errors import EffectEngineError, TransientEffectError
    from tests.support.redis_servers import RedisServer

    server = RedisServer(config={"rename-command": 'EVALSHA ""'}).start()
    try:
        client = server.client()
        engine = EffectsEngine(client, "cfg-unexpected", functions_dir=None)
        ref = EventRef.for_aggregate(str(uuid.uuid4()), "cfg", "x")
        with pytest.raises(EffectEngineError) as stopped:
            engine.apply([(ref, Effects().incrby(aggregate_keys("cfg", "x")("n"), 1))])
        assert not isinstance(stopped.value, TransientEffectError)
        assert "evalsha" in str(stopped.value).lower()
        assert client.dbsize() == 0
        client.close()
    finally:
        server.stop()
