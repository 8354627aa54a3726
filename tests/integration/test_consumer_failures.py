"""Permanent failures end in `<topic>.dlq` and the failure stream, with no partial effect, and the
partition moves on; a flaky handler is retried in place; async handlers work."""

from __future__ import annotations

import uuid

import pytest

from postbox.consumer import ConsumerConfig
from postbox.consumer.deadletter import DLQ_HEADERS
from tests.apps.counting import strict
from tests.support.consumers import ThreadedRuntime, committed, create_topic, json_event, produce, read_all, router_headers, wait_for

pytestmark = pytest.mark.integration


def test_poison_records_are_dead_lettered_and_the_partition_moves_on(settings, redis_client, unique):
    agg = f"fail{unique}"
    topic = f"outbox.event.{agg}"
    group = f"test-fail-{unique}"
    create_topic(settings.kafka_bootstrap, topic, partitions=2)
    redis_client.set(f"{{{agg}:a1}}:str", "a string, not a hash")
    ids = [str(uuid.uuid4()) for _ in range(9)]
    records = [
        json_event(agg, "a1", "Counted", 1, event_id=ids[0], partition=0),
        (b"a1", b'{"seq": 2, garbage', router_headers(ids[1], "Counted", agg), 0),  # undecodable (Avro of a type with no schema here is UnknownEventType)
        json_event(agg, "a1", "Mystery", 3, event_id=ids[2], partition=0),  # unknown event type
        json_event(agg, "a1", "Boom", 4, event_id=ids[3], partition=0),  # handler raises every time
        json_event(agg, "a1", "Clash", 5, event_id=ids[4], partition=0),  # WRONGTYPE at its 2nd command
        json_event(agg, "a1", "Flaky", 6, event_id=ids[5], partition=0),  # raises once, then succeeds
        json_event(agg, "a1", "AsyncCounted", 7, event_id=ids[6], partition=0),
        json_event(agg, "a1", "Counted", 8, event_id=ids[7], partition=0),
        json_event(agg, "b1", "Counted", 1, event_id=ids[8], partition=1),  # the other partition
    ]
    produce(settings.kafka_bootstrap, topic, records)
    config = ConsumerConfig.load(group=group, topics=topic, handler_retries=2, batch_wait_ms=50)
    runtime = ThreadedRuntime(strict, config).start()
    seq_key = f"{{{agg}:a1}}:seq"
    try:
        wait_for(lambda: runtime.ok() and committed(settings.kafka_bootstrap, group, topic, 2) == {0: 8, 1: 1}, 60, "offsets 8 and 1 committed")
    finally:
        runtime.stop()

    # Effects: only the good events, in order; WRONGTYPE and Boom left nothing behind.
    assert [int(x) for x in redis_client.lrange(seq_key, 0, -1)] == [1, 6, 7, 8]
    assert redis_client.hget(f"{{{agg}:a1}}:count", "n") == b"4"
    assert redis_client.lrange(f"{{{agg}:b1}}:seq", 0, -1) == [b"1"]
    assert redis_client.get(f"{{{agg}:a1}}:str") == b"a string, not a hash"

    # DLQ: the four poison records, original key/value/headers plus the contract's headers.
    dlq = read_all(settings.kafka_bootstrap, f"{topic}.dlq", expect=4)
    assert len(dlq) == 4
    by_id = {dict(m.headers())["id"].decode(): m for m in dlq}
    assert set(by_id) == {ids[1], ids[2], ids[3], ids[4]}
    expected = {ids[1]: "DecodeError", ids[2]: "UnknownEventType", ids[3]: "HandlerError:ValueError", ids[4]: "EffectFailed:WRONGTYPE"}
    originals = {r[2][0][1].decode(): r for r in records}
    for event_id, cls in expected.items():
        msg = by_id[event_id]
        headers = dict(msg.headers())
        key, value, original_headers, _ = originals[event_id]
        assert msg.key() == key and msg.value() == value
        assert msg.partition() == 0
        for name, raw in original_headers:
            assert headers[name] == raw
        assert set(DLQ_HEADERS) <= set(headers)
        assert headers["postbox.error.class"].decode() == cls
        assert headers["postbox.error.kind"] == b"permanent"
        assert headers["postbox.origin.topic"].decode() == topic
        assert headers["postbox.origin.partition"] == b"0"
        assert headers["postbox.origin.offset"].decode() == str(ids.index(event_id))
        assert headers["postbox.group"].decode() == group
        assert headers["postbox.failed_at"].decode().endswith("Z")
        assert "\n" not in headers["postbox.error"].decode()
    assert by_id[ids[3]].headers() and dict(by_id[ids[3]].headers())["postbox.attempts"] == b"3"  # 1 + 2 retries
    assert b"WRONGTYPE" in dict(by_id[ids[4]].headers())["postbox.error"]

    # Failure stream: one record per poison event (the engine's own for WRONGTYPE).
    entries = [{k.decode(): v.decode() for k, v in f.items()} for _, f in redis_client.xrange(f"postbox:failures:{group}")]
    seen = {e.get("event_id") or e.get("event"): e for e in entries}
    assert set(seen) == {ids[1], ids[2], ids[3], ids[4]}
    assert seen[ids[1]]["error_class"] == "DecodeError" and seen[ids[1]]["offset"] == "1"
    assert seen[ids[2]]["error_class"] == "UnknownEventType"
    assert seen[ids[3]]["error_class"] == "HandlerError:ValueError" and seen[ids[3]]["topic"] == topic
    assert "WRONGTYPE" in seen[ids[4]]["error"]

    m = runtime.metrics
    assert m.total("postbox_consumer_dead_lettered_total") == 4
    assert m.total("postbox_consumer_handler_retries_total") == 3  # Boom twice, Flaky once
    assert m.value("postbox_consumer_failures_total", topic=topic, error_class="EffectFailed:WRONGTYPE", kind="permanent") == 1
    redis_client.delete(seq_key, f"{{{agg}:a1}}:count", f"{{{agg}:b1}}:seq", f"{{{agg}:b1}}:count", f"{{{agg}:a1}}:str", f"postbox:failures:{group}")
