"""Documented consumer behaviours that had no test (issue 18): durability refusal, the engine-error
exit, an unacknowledged dead letter, a paused partition among running ones, and the two handler
error classes. Each test names where its behaviour is documented."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from postbox.consumer import ConsumerConfig
from postbox.effects import EffectsEngine
from tests.apps import documented
from tests.support.consumers import (
    ConsumerProcess,
    ThreadedRuntime,
    committed,
    create_topic,
    json_event,
    produce,
    read_all,
    wait_for,
)
from tests.support.redis_servers import RedisServer

pytestmark = pytest.mark.integration
NO_COMMIT = -1001  # what Kafka reports for a partition without a committed offset


def _events(agg: str, kinds: list[str], partition: int = 0, aggregate_id: str = "a1") -> tuple[list, list[str]]:
    ids = [str(uuid.uuid4()) for _ in kinds]
    return [json_event(agg, aggregate_id, kind, seq, partition=partition, event_id=ids[seq]) for seq, kind in enumerate(kinds)], ids


def _seq(client, agg: str, aggregate_id: str) -> list[int]:
    return [int(x) for x in client.lrange(f"{{{agg}:{aggregate_id}}}:seq", 0, -1)]


def test_require_durable_refuses_to_start_against_redis_without_aof(settings, unique, tmp_path):
    """docs/consumer.md, `--require-durable` (default true): "refuse to start, and never commit,
    unless Redis acknowledges durably". A Debian redis-server with `appendonly no`: `postbox consume`
    exits 1 (configuration error, docs/consumer.md "Shutdown") naming the reason and the fix, and the
    group commits nothing although records wait on the topic."""
    agg = f"dur{unique}"
    topic, group = f"outbox.event.{agg}", f"test-dur-{unique}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    produce(settings.kafka_bootstrap, topic, _events(agg, ["Counted"] * 3)[0])
    server = RedisServer(config={"appendonly": "no"}).start()
    proc = ConsumerProcess("tests.apps.documented:app", {"POSTBOX_REDIS_URL": server.url, "POSTBOX_KAFKA_BOOTSTRAP": settings.kafka_bootstrap},
                           tmp_path / "consumer.log", ["--group", group, "--topics", topic])
    try:
        code = proc.process.wait(timeout=60)
        out = proc.output()
        assert code == 1, out
        assert "NOT durable" in out and "appendonly is off" in out, out
        assert "fix:" in out and "appendfsync always" in out, out
        assert "Traceback" not in out, out
        assert committed(settings.kafka_bootstrap, group, topic, 1) == {0: NO_COMMIT}
        client = server.client()
        # nothing was applied either: the only key is the group registry entry the engine's load() wrote
        assert set(client.scan_iter()) <= {b"postbox:groups"}, "nothing was applied either"
        client.close()
    finally:
        proc.close()
        server.stop()


def test_require_durable_never_commits_while_redis_is_not_durable(settings, unique):
    """docs/consumer.md, Failures table: "Redis not durable (`require_durable`)" is transient — the
    partition stops at its first unfinished record and nothing at or after it is committed; once
    Redis is durable again the records are retried and every event is applied exactly once, in order.
    AOF is switched off under a running consumer (`CONFIG SET appendonly no`) and back on."""
    agg = f"durm{unique}"
    topic, group = f"outbox.event.{agg}", f"test-durm-{unique}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    server = RedisServer().start()
    admin = server.client()
    config = ConsumerConfig.load(group=group, topics=topic, redis_url=server.url, batch_wait_ms=20,
                                 backoff_base_ms=100, backoff_max_ms=500)
    runtime = ThreadedRuntime(documented.app, config)
    # The runtime's own engine re-reads the server's persistence once a minute; this one every 0.2 s.
    runtime.runtime.engine = EffectsEngine(runtime.runtime.redis, group, marker_ttl=config.marker_ttl, durability_refresh_s=0.2)
    runtime.start()
    try:
        produce(settings.kafka_bootstrap, topic, [json_event(agg, "a1", "Counted", i, partition=0) for i in range(3)])
        wait_for(lambda: runtime.ok() and committed(settings.kafka_bootstrap, group, topic, 1) == {0: 3}, 60, "3 committed while durable")

        admin.config_set("appendonly", "no")
        produce(settings.kafka_bootstrap, topic, [json_event(agg, "a1", "Counted", i, partition=0) for i in range(3, 6)])
        retries = lambda: runtime.metrics.value("postbox_consumer_retries_total", reason="not-durable")  # noqa: E731
        wait_for(lambda: runtime.ok() and retries() >= 3, 60, "not-durable retries")
        assert committed(settings.kafka_bootstrap, group, topic, 1) == {0: 3}, "committed past a non-durable apply"
        assert _seq(admin, agg, "a1") == list(range(6)), "the effects ran (in memory); only the commit is held back"

        admin.config_set("appendonly", "yes")
        wait_for(lambda: runtime.ok() and committed(settings.kafka_bootstrap, group, topic, 1) == {0: 6}, 60, "6 committed once durable")
        assert _seq(admin, agg, "a1") == list(range(6)), "the retried batch came back as duplicates"
        assert runtime.metrics.total("postbox_consumer_duplicates_skipped_total") >= 3
        assert runtime.stop() == 0
    finally:
        if runtime.thread.is_alive():
            runtime.runtime.stop()
            runtime.thread.join(30)
        admin.close()
        server.stop()


def test_engine_error_exits_3_with_the_batch_uncommitted(settings, redis_client, unique, tmp_path):
    """docs/guarantees.md, bad-input catalogue: "handler touching a key outside the consumer's ACL
    patterns — engine error, exit 3: the consumer stops without committing, naming the refusal and
    the fix (`POSTBOX_REDIS_KEY_PATTERNS`)"; docs/consumer.md, Shutdown and Failures: exit code 3,
    the batch is not committed. Runs as the stack's ACL user `postbox_consumer` (POSTBOX_REDIS_URL):
    a good event, the refused one, another good one in one batch — nothing committed, nothing
    dead-lettered, the outside key never written."""
    agg = f"acl{unique}"
    topic, group = f"outbox.event.{agg}", f"test-acl-{unique}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    records, _ = _events(agg, ["Counted", "OutsideAcl", "Counted"], aggregate_id=f"x{unique}")
    produce(settings.kafka_bootstrap, topic, records)
    assert "postbox_consumer:" in settings.redis_url, "the stack's POSTBOX_REDIS_URL should be the ACL user"
    proc = ConsumerProcess("tests.apps.documented:app", {"POSTBOX_REDIS_URL": settings.redis_url, "POSTBOX_KAFKA_BOOTSTRAP": settings.kafka_bootstrap},
                           tmp_path / "consumer.log", ["--group", group, "--topics", topic, "--batch-wait-ms", "500"])
    try:
        code = proc.process.wait(timeout=90)
        out = proc.output()
        assert code == 3, out
        assert "effects engine error" in out and "permission" in out.lower(), out
        assert "POSTBOX_REDIS_KEY_PATTERNS" in out, out
        assert committed(settings.kafka_bootstrap, group, topic, 1) == {0: NO_COMMIT}
        assert redis_client.exists(f"outside:x{unique}") == 0
        assert read_all(settings.kafka_bootstrap, f"{topic}.dlq", expect=1, timeout=3) == []
    finally:
        proc.close()
        redis_client.delete(f"{{{agg}:x{unique}}}:seq", f"{{{agg}:x{unique}}}:count")


def test_unacknowledged_dead_letter_leaves_the_origin_offset_uncommitted(settings, redis_client, unique):
    """docs/consumer.md, Dead-letter contract: "the origin offset is committed only after the
    delivery report confirmed it. If the DLQ is unreachable the partition backs off and the record
    is retried ... it never goes missing"; Failures table: "the DLQ produce not acknowledged" is
    transient. The DLQ topic refuses every record, even the reference-only form of one too large
    for it (`max.message.bytes` 64): the partition stops at the poison record (the good event before it is committed, the one after it is not); once the
    topic accepts records the dead letter lands and the partition moves on."""
    agg = f"dlqna{unique}"
    topic, group, dlq = f"outbox.event.{agg}", f"test-dlqna-{unique}", f"outbox.event.{agg}.dlq"
    create_topic(settings.kafka_bootstrap, topic, 1)
    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})
    admin.create_topics([NewTopic(dlq, num_partitions=1, replication_factor=1, config={"max.message.bytes": "64"})])[dlq].result(timeout=30)
    records, ids = _events(agg, ["Counted", "Mystery", "Counted"])
    produce(settings.kafka_bootstrap, topic, records)
    config = ConsumerConfig.load(group=group, topics=topic, batch_wait_ms=20, backoff_base_ms=100, backoff_max_ms=500)
    runtime = ThreadedRuntime(documented.app, config).start()
    try:
        wait_for(lambda: runtime.ok() and runtime.metrics.value("postbox_consumer_retries_total", reason="dlq") >= 2, 60, "DLQ retries")
        assert committed(settings.kafka_bootstrap, group, topic, 1) == {0: 1}, "committed past an unacknowledged dead letter"
        assert runtime.metrics.total("postbox_consumer_dead_lettered_total") == 0

        entry = ConfigEntry("max.message.bytes", "1048588", incremental_operation=AlterConfigOpType.SET)
        resource = ConfigResource("topic", dlq, incremental_configs=[entry])
        admin.incremental_alter_configs([resource])[resource].result(timeout=30)
        wait_for(lambda: runtime.ok() and committed(settings.kafka_bootstrap, group, topic, 1) == {0: 3}, 60, "the partition moving on")
    finally:
        runtime.stop()
    letters = read_all(settings.kafka_bootstrap, dlq, expect=1)
    assert {dict(m.headers())["id"].decode() for m in letters} == {ids[1]}
    assert all(dict(m.headers())["postbox.origin.offset"] == b"1" for m in letters)
    assert _seq(redis_client, agg, "a1") == [0, 2]
    redis_client.delete(f"{{{agg}:a1}}:seq", f"{{{agg}:a1}}:count", f"postbox:failures:{group}")


def test_a_paused_partition_does_not_stop_the_others_and_transient_handler_errors_are_retried(settings, redis_client, unique):
    """docs/consumer.md, Failures table: a handler raising `TransientEffectError` is transient — "the
    affected partitions stop at their first unfinished record ... paused and, after an exponential
    backoff with jitter, resumed and sought back to that record. Other partitions keep flowing.
    Never skipped". Partition 0 holds a Transient event between two Counted ones; partition 1 keeps
    receiving events. While the gate is closed partition 1 is consumed to its end and partition 0
    stays committed before the Transient event; after it opens, partition 0 finishes in order and
    nothing is dead-lettered."""
    agg = f"pause{unique}"
    topic, group = f"outbox.event.{agg}", f"test-pause-{unique}"
    create_topic(settings.kafka_bootstrap, topic, 2)
    documented.transient_gate.clear()
    p0, ids0 = _events(agg, ["Counted", "Transient", "Counted"], partition=0, aggregate_id="a0")
    produce(settings.kafka_bootstrap, topic, p0 + [json_event(agg, "b1", "Counted", i, partition=1) for i in range(3)])
    config = ConsumerConfig.load(group=group, topics=topic, batch_wait_ms=20, backoff_base_ms=100, backoff_max_ms=400, handler_retries=0)
    runtime = ThreadedRuntime(documented.app, config).start()
    try:
        wait_for(lambda: runtime.ok() and committed(settings.kafka_bootstrap, group, topic, 2) == {0: 1, 1: 3}, 60, "p0 at 1, p1 at 3")
        wait_for(lambda: documented.transient_attempts[ids0[1]] >= 3, 30, "the transient event retried")
        assert runtime.metrics.value("postbox_consumer_retries_total", reason="handler") >= 2
        # partition 0 is paused on its Transient event: partition 1 still flows
        produce(settings.kafka_bootstrap, topic, [json_event(agg, "b1", "Counted", i, partition=1) for i in range(3, 8)])
        wait_for(lambda: runtime.ok() and committed(settings.kafka_bootstrap, group, topic, 2)[1] == 8, 60, "p1 at 8 while p0 is paused")
        assert committed(settings.kafka_bootstrap, group, topic, 2)[0] == 1
        assert _seq(redis_client, agg, "a0") == [0]

        documented.transient_gate.set()
        wait_for(lambda: runtime.ok() and committed(settings.kafka_bootstrap, group, topic, 2) == {0: 3, 1: 8}, 60, "p0 finished")
    finally:
        runtime.stop()
        documented.transient_gate.clear()
    assert _seq(redis_client, agg, "a0") == [0, 1, 2]
    assert _seq(redis_client, agg, "b1") == list(range(8))
    assert runtime.metrics.total("postbox_consumer_dead_lettered_total") == 0
    redis_client.delete(*(f"{{{agg}:{a}}}:{k}" for a in ("a0", "b1") for k in ("seq", "count")))


def test_invalid_effect_error_is_dead_lettered_without_retry(settings, redis_client, unique):
    """docs/consumer.md, Failures table: "an `InvalidEffectError` from the builder (not retried)" is
    permanent — dead-lettered as `InvalidEffectError` with `postbox.attempts` 1, even with handler
    retries configured, and the partition moves on."""
    agg = f"inval{unique}"
    topic, group = f"outbox.event.{agg}", f"test-inval-{unique}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    records, ids = _events(agg, ["Counted", "Invalid", "Counted"])
    produce(settings.kafka_bootstrap, topic, records)
    config = ConsumerConfig.load(group=group, topics=topic, batch_wait_ms=20, handler_retries=3)
    runtime = ThreadedRuntime(documented.app, config).start()
    try:
        wait_for(lambda: runtime.ok() and committed(settings.kafka_bootstrap, group, topic, 1) == {0: 3}, 60, "3 committed")
    finally:
        runtime.stop()
    assert documented.invalid_attempts[ids[1]] == 1, "an InvalidEffectError must not be retried in place"
    assert runtime.metrics.total("postbox_consumer_handler_retries_total") == 0
    (letter,) = read_all(settings.kafka_bootstrap, f"{topic}.dlq", expect=1)
    headers = dict(letter.headers())
    assert headers["id"].decode() == ids[1]
    assert headers["postbox.error.class"] == b"InvalidEffectError"
    assert headers["postbox.attempts"] == b"1"
    assert b"mapping is empty" in headers["postbox.error"]
    assert _seq(redis_client, agg, "a1") == [0, 2]
    redis_client.delete(f"{{{agg}:a1}}:seq", f"{{{agg}:a1}}:count", f"postbox:failures:{group}")
