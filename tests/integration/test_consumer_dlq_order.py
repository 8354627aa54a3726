"""#12.8: order per aggregate holds when the dead-letter produce fails.

The broker itself refuses the dead letters: the DLQ topic is created beforehand with
``max.message.bytes`` = 200, smaller than any dead letter, full or reference-only. While it refuses,
the consumer must not let any record of a partition take effect before an earlier record of that
partition whose dead letter is still owed. The test then raises the limit (an operator fixing the
topic) and "deploys a fix" (a handler that failed now succeeds), and checks the final order.

On the main this test was written against, both partitions break order: the batch was applied
before its dead letters were written, so the refused record was run again after its successors
(partition 0: the gated event applied after seq 3 and 5; partition 1: the WRONGTYPE event applied
after the event that removed the clash).
"""

from __future__ import annotations

import json
import threading
import uuid

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from postbox.consumer import App, ConsumerConfig
from postbox.effects import Effects, aggregate_keys
from postbox.effects.keys import EventRef, KeyLayout
from postbox.events import Event
from tests.apps.counting import record
from tests.support.consumers import ThreadedRuntime, committed, create_topic, produce, read_all, router_headers, wait_for

pytestmark = pytest.mark.integration

FIXED = threading.Event()
#: Set once the gated handler ran with the fix deployed: every attempt that failed before it has
#: met the refusing topic (the runtime prepares the next batch while one is in flight).
RAN_FIXED = threading.Event()
order_app = App()


@order_app.handler("*", "Counted")
def counted(event: Event, fx: Effects) -> None:
    record(event, fx)


@order_app.handler("*", "Gated")
def gated(event: Event, fx: Effects) -> None:
    """Fails until the test 'deploys the fix' (FIXED), then records like Counted."""
    if not FIXED.is_set():
        raise ValueError("not fixed yet")
    RAN_FIXED.set()
    record(event, fx)


@order_app.handler("*", "Clash")
def clash(event: Event, fx: Effects) -> None:
    """Pushes its seq, then HSETs ``...:str`` — WRONGTYPE while that key is a string."""
    k = aggregate_keys(event.aggregate_type, event.aggregate_id)
    fx.rpush(k("seq"), int(event.payload["seq"]))
    fx.hset(k("str"), "field", "value")


@order_app.handler("*", "Unclash")
def unclash(event: Event, fx: Effects) -> None:
    """Removes the string that makes Clash fail, and records."""
    k = aggregate_keys(event.aggregate_type, event.aggregate_id)
    fx.delete(k("str"))
    record(event, fx)


def _event(agg: str, key: str, event_type: str, seq: int, partition: int) -> tuple[bytes, bytes, list, int]:
    return (key.encode(), json.dumps({"seq": seq}).encode(), router_headers(str(uuid.uuid4()), event_type, agg), partition)


def _set_max_message_bytes(admin: AdminClient, topic: str, value: int) -> None:
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("max.message.bytes", str(value), incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)


def test_a_refused_dead_letter_never_lets_a_later_event_of_its_partition_apply_first(settings, redis_client, unique):
    agg = f"dlqorder{unique}"
    topic = f"outbox.event.{agg}"
    group = f"test-dlqorder-{unique}"
    create_topic(settings.kafka_bootstrap, topic, partitions=2)
    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})
    dlq = f"{topic}.dlq"
    admin.create_topics([NewTopic(dlq, num_partitions=2, replication_factor=1, config={"max.message.bytes": "200"})])[dlq].result(timeout=30)
    redis_client.set(f"{{{agg}:a}}:str", "a string, not a hash")
    redis_client.set(f"{{{agg}:b}}:str", "a string, not a hash")
    FIXED.clear()
    RAN_FIXED.clear()
    records = [
        # partition 0: a handler failure (known before the apply) followed by later events
        _event(agg, "a", "Counted", 1, 0),
        _event(agg, "a", "Gated", 2, 0),
        _event(agg, "a", "Counted", 3, 0),
        _event(agg, "a", "Clash", 4, 0),
        _event(agg, "a", "Unclash", 5, 0),
        # partition 1: an effect failure (found by the apply, its successor applied in the same call)
        _event(agg, "b", "Counted", 6, 1),
        _event(agg, "b", "Clash", 7, 1),
        _event(agg, "b", "Unclash", 8, 1),
    ]
    produce(settings.kafka_bootstrap, topic, records)
    config = ConsumerConfig.load(group=group, topics=topic, handler_retries=0, batch_wait_ms=200, backoff_base_ms=100, backoff_max_ms=500)
    runtime = ThreadedRuntime(order_app, config).start()
    try:
        # The broker refused dead letters of both partitions (the retry metric says so) ...
        wait_for(lambda: runtime.ok() and runtime.metrics.value("postbox_consumer_retries_total", reason="dlq") >= 4, 60,
                 "dead-letter produces refused and retried")
        # ... and while it refuses, nothing is committed past the refused records.
        during = committed(settings.kafka_bootstrap, group, topic, 2)
        assert all(offset <= 1 for offset in during.values()), during
        FIXED.set()  # a fixed handler is deployed
        wait_for(RAN_FIXED.is_set, 60, "the fixed handler ran")  # a batch prepared before the fix has met the refusal
        _set_max_message_bytes(admin, dlq, 1_048_588)  # the operator fixes the DLQ topic
        wait_for(lambda: runtime.ok() and committed(settings.kafka_bootstrap, group, topic, 2) == {0: 5, 1: 3}, 60,
                 "both partitions committed to their end")
    finally:
        runtime.stop()

    seq_a = [int(x) for x in redis_client.lrange(f"{{{agg}:a}}:seq", 0, -1)]
    seq_b = [int(x) for x in redis_client.lrange(f"{{{agg}:b}}:seq", 0, -1)]
    # Partition 0: seq 2 was never dead-lettered (its produce was refused), so after the fix it is
    # applied — before 3 and 5, its successors. 4 met the string (5 had not run) and is dead-lettered.
    assert seq_a == [1, 2, 3, 5], seq_a
    # Partition 1: 7 failed with WRONGTYPE after 8 was applied in the same call; its verdict stands
    # (dead-lettered once the topic takes it), it never takes effect after 8.
    assert seq_b == [6, 8], seq_b
    letters = read_all(settings.kafka_bootstrap, dlq, expect=2)
    by_offset = {(m.partition(), int(dict(m.headers())["postbox.origin.offset"])): dict(m.headers()) for m in letters}
    assert set(by_offset) == {(0, 3), (1, 1)}, by_offset
    assert all(h["postbox.error.class"] == b"EffectFailed:WRONGTYPE" for h in by_offset.values())
    # Both verdicts note their dead letter acknowledged (written on the retry in this same process,
    # which dead-letters from its memory: a later reader of the record finishes it, sends nothing).
    layout = KeyLayout("postbox", group, slot_aligned=False)
    for key, sent in (("a", records[3]), ("b", records[6])):
        event_id = dict(sent[2])["id"].decode()
        marker = layout.marker(event_id.encode(), EventRef.for_aggregate(event_id, agg, key).tag_bytes)
        assert redis_client.get(marker)[:1] == b"D", (key, redis_client.get(marker))
    redis_client.delete(*[f"{{{agg}:{a}}}:{p}" for a in "ab" for p in ("seq", "count", "str")], f"postbox:failures:{group}")
