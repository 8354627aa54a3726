"""#12.4: a record too large to dead-letter never blocks its partition.

Records are produced by kafka-python (an independent client). On the main this was written
against, the first test never got past offset 1: the 999,989-byte payload (under the writer's
documented 1,000,000-byte limit) failed its handler, the dead-letter produce was refused by
librdkafka's own 1,000,000-byte default (MSG_SIZE_TOO_LARGE), treated as transient and retried
forever, so the good events after it were never applied. The second test had no way out at all:
a dead-letter topic that takes less than the record.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from postbox.consumer import ConsumerConfig
from tests.bad_input.apps import app
from tests.support.consumers import ROOT, ThreadedRuntime, committed, create_topic, read_all, router_headers, wait_for
from tests.support.independent import produce_independently

pytestmark = pytest.mark.integration


def _padded(seq: int, size: int) -> bytes:
    """A JSON payload ``{"seq": N, "pad": "xxx..."}`` of exactly ``size`` bytes."""
    head = json.dumps({"seq": seq, "pad": ""}).encode()
    value = json.dumps({"seq": seq, "pad": "x" * (size - len(head))}).encode()
    assert len(value) == size
    return value


def _good(agg: str, seq: int) -> tuple[bytes, bytes, list, int]:
    return (b"a", json.dumps({"seq": seq}).encode(), router_headers(str(uuid.uuid4()), "Counted", agg), 0)


def test_failed_records_near_the_size_limit_are_dead_lettered_in_full_and_the_partition_moves_on(settings, redis_client, unique):
    agg = f"big{unique}"
    topic = f"outbox.event.{agg}"
    group = f"test-big-{unique}"
    create_topic(settings.kafka_bootstrap, topic, partitions=1)
    under_writer_limit = _padded(2, 999_989)
    from_another_client = _padded(4, 1_030_000)
    ids = [str(uuid.uuid4()), str(uuid.uuid4())]
    records = [
        _good(agg, 1),
        (b"a", under_writer_limit, router_headers(ids[0], "Boom", agg), 0),
        _good(agg, 3),
        (b"a", from_another_client, router_headers(ids[1], "Boom", agg), 0),
        _good(agg, 5),
    ]
    produce_independently(settings.kafka_bootstrap, topic, records, max_request_size=1_100_000)
    runtime = ThreadedRuntime(app, ConsumerConfig.load(group=group, topics=topic, handler_retries=0, batch_wait_ms=50)).start()
    try:
        wait_for(lambda: runtime.ok() and committed(settings.kafka_bootstrap, group, topic, 1) == {0: 5}, 60,
                 "the partition committed past both large records")
        assert runtime.ok()  # the consumer stayed up
    finally:
        runtime.stop()

    assert [int(x) for x in redis_client.lrange(f"{{{agg}:a}}:seq", 0, -1)] == [1, 3, 5]
    letters = read_all(settings.kafka_bootstrap, f"{topic}.dlq", expect=2)
    by_id = {dict(m.headers())["id"].decode(): m for m in letters}
    assert set(by_id) == set(ids)
    for event_id, value in zip(ids, (under_writer_limit, from_another_client)):
        headers = dict(by_id[event_id].headers())
        assert by_id[event_id].value() == value  # in full: the DLQ topic follows the origin's limit
        assert headers["postbox.error.class"] == b"HandlerError:ValueError"
        assert "postbox.reference-only" not in headers
    redis_client.delete(f"{{{agg}:a}}:seq", f"{{{agg}:a}}:count", f"postbox:failures:{group}")


def test_a_record_larger_than_its_dead_letter_topic_is_dead_lettered_reference_only_and_replays_from_its_origin(settings, redis_client, unique):
    agg = f"ref{unique}"
    topic = f"outbox.event.{agg}"
    dlq = f"{topic}.dlq"
    group = f"test-ref-{unique}"
    create_topic(settings.kafka_bootstrap, topic, partitions=1)
    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})
    # An operator made the DLQ topic smaller than the records of its origin.
    admin.create_topics([NewTopic(dlq, num_partitions=1, replication_factor=1, config={"max.message.bytes": "100000"})])[dlq].result(timeout=30)
    big = _padded(2, 300_000)
    event_id = str(uuid.uuid4())
    records = [_good(agg, 1), (b"a", big, router_headers(event_id, "Boom", agg), 0), _good(agg, 3)]
    produce_independently(settings.kafka_bootstrap, topic, records)
    runtime = ThreadedRuntime(app, ConsumerConfig.load(group=group, topics=topic, handler_retries=0, batch_wait_ms=50)).start()
    try:
        wait_for(lambda: runtime.ok() and committed(settings.kafka_bootstrap, group, topic, 1) == {0: 3}, 60,
                 "the partition committed past the record")
    finally:
        runtime.stop()
    assert [int(x) for x in redis_client.lrange(f"{{{agg}:a}}:seq", 0, -1)] == [1, 3]

    [letter] = read_all(settings.kafka_bootstrap, dlq, expect=1)
    headers = dict(letter.headers())
    assert letter.value() is None and letter.key() == b"a"
    assert headers["postbox.reference-only"] == b"true"
    assert int(headers["postbox.original.bytes"]) >= 300_000
    assert headers["id"] == event_id.encode() and headers["event_type"] == b"Boom"
    assert headers["postbox.error.class"] == b"HandlerError:ValueError"
    assert (headers["postbox.origin.topic"], headers["postbox.origin.partition"], headers["postbox.origin.offset"]) == (topic.encode(), b"0", b"1")
    assert b"reference-only" in headers["postbox.error"] and f"{topic}[0]@1".encode() in headers["postbox.error"]

    env = {"POSTBOX_KAFKA_BOOTSTRAP": settings.kafka_bootstrap}
    shown = _postbox(env, "dlq", "show", event_id, "--topic", topic)
    assert shown.returncode == 0, shown.stderr
    assert "reference-only" in shown.stdout
    # --force: event 3 of aggregate "a" was applied after it, and the copy goes after that
    replayed = _postbox(env, "dlq", "replay", "--topic", topic, "--event-id", event_id, "--execute", "--yes", "--force", "--json")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    [item] = json.loads(replayed.stdout)["items"]
    assert item["status"] == "sent" and item["sent"]["offset"] == 3, item
    back = [m for m in read_all(settings.kafka_bootstrap, topic, expect=4) if m.offset() == 3]
    assert back and back[0].value() == big  # the original bytes, read from the origin offset
    assert dict(back[0].headers())["id"] == event_id.encode()
    redis_client.delete(f"{{{agg}:a}}:seq", f"{{{agg}:a}}:count", f"postbox:failures:{group}")


def _postbox(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([sys.executable, "-m", "postbox", *args], cwd=ROOT, env={**os.environ, **env, "COLUMNS": "200"},
                          capture_output=True, text=True, timeout=120)
