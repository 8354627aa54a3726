"""A failure verdict outlives the consumer that found it: it is in the event's marker.

Event 1 of an aggregate fails in the script (WRONGTYPE: its key holds a string) while the broker
refuses every dead-letter produce; event 2 of the same aggregate, in the same batch, is applied.
The partition stops at 1 and owes its verdict: "dead-letter it, never run it again" — run again
once the cause is gone, its effect would land after event 2's. The consumer stops before the
dead-letter topic is back (a deploy, a crash, a rebalance) and the key is fixed meanwhile. The
next consumer of the group must still dead-letter event 1 without running it.

When the verdict lived only in the process's memory, the next consumer ran event 1 again and its
effect took effect after event 2's (the aggregate's list read [2, 1]). Once the dead letter is
acknowledged the marker says so (``D``), so a later reader would not write it again.

The records are produced both by our own test producer (confluent-kafka) and by kafka-python, a
client postbox does not use: the verdict is keyed by what the record carries, whoever wrote it.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from postbox.consumer import ConsumerConfig
from postbox.consumer.dlq_record import H_CLASS
from postbox.effects.keys import EventRef, KeyLayout
from tests.apps.counting import strict
from tests.support.consumers import ThreadedRuntime, committed, create_topic, json_event, produce, read_all, wait_for
from tests.support.independent import produce_independently

pytestmark = pytest.mark.integration


def _dlq_max_bytes(bootstrap: str, topic: str, max_bytes: int, *, create: bool = False) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if create:  # below any dead letter: the broker refuses every produce to it
        admin.create_topics([NewTopic(topic, 1, 1, config={"max.message.bytes": str(max_bytes)})])[topic].result(30)
        return
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("max.message.bytes", str(max_bytes), incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


@pytest.mark.parametrize("producer", [produce, produce_independently], ids=["confluent-kafka", "kafka-python"])
def test_a_verdict_owed_when_the_consumer_stops_is_kept_by_the_next_one(settings, redis_client, unique, producer):
    agg = f"owed{unique}"
    topic, group = f"outbox.event.{agg}", f"test-owed-{unique}"
    create_topic(settings.kafka_bootstrap, topic, partitions=1)
    _dlq_max_bytes(settings.kafka_bootstrap, f"{topic}.dlq", 64, create=True)
    redis_client.set(f"{{{agg}:a1}}:str", "a string: event 1's HSET fails with WRONGTYPE")
    first_id = str(uuid.uuid4())
    producer(settings.kafka_bootstrap, topic, [
        json_event(agg, "a1", "Counted", 0, partition=0),
        json_event(agg, "a1", "Clash", 1, event_id=first_id, partition=0),
        json_event(agg, "a1", "Counted", 2, partition=0),
    ])
    seq = f"{{{agg}:a1}}:seq"
    config = ConsumerConfig.load(group=group, topics=topic, batch_wait_ms=200, backoff_max_ms=500)
    runtime = ThreadedRuntime(strict, config).start()
    try:
        wait_for(lambda: runtime.ok() and redis_client.lrange(seq, 0, -1) == [b"0", b"2"], 60, "events 0 and 2 applied, 1 failed")
        wait_for(lambda: runtime.runtime.metrics.total("postbox_consumer_retries_total") >= 2, 60, "the dead letter refused twice")
    finally:
        runtime.stop()
    assert committed(settings.kafka_bootstrap, group, topic, 1) == {0: 1}, "the commit stops at the failed record"

    redis_client.delete(f"{{{agg}:a1}}:str")  # the cause is gone: run again, event 1 would apply now
    _dlq_max_bytes(settings.kafka_bootstrap, f"{topic}.dlq", 1_048_588)
    runtime = ThreadedRuntime(strict, config).start()
    try:
        wait_for(lambda: runtime.ok() and committed(settings.kafka_bootstrap, group, topic, 1) == {0: 3}, 60, "offset 3 committed")
    finally:
        runtime.stop()
    assert redis_client.lrange(seq, 0, -1) == [b"0", b"2"], "event 1 ran again and took effect after event 2"
    dead = read_all(settings.kafka_bootstrap, f"{topic}.dlq", expect=1)
    assert [dict(m.headers())["id"].decode() for m in dead] == [first_id]
    assert dict(dead[0].headers())[H_CLASS] == b"EffectFailed:WRONGTYPE"
    marker = KeyLayout("postbox", group, slot_aligned=False).marker(first_id.encode(), EventRef.for_aggregate(first_id, agg, "a1").tag_bytes)
    assert redis_client.get(marker).startswith(b"D"), "the verdict notes the dead letter acknowledged"
