"""A topic deleted between a command's topic listing and its offset requests (an operator cleaning
up during an incident, a test beside another): the commands that go through every topic (`topics`,
`trace` and `dlq list` without `--topic`, `lag`) leave it out instead of failing with librdkafka's
UNKNOWN_TOPIC_OR_PART and a traceback; a command that named the topic gets UnknownTopicError.

Before: `Kafka.describe_topics` and `Kafka.watermarks` raised the raw KafkaException (found by
the audit for running the stack's tests two at a time, 2026-12-02). The deletion is real: the
listing is taken, then the topic is deleted on the broker, then the offsets are asked for and the
records read."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from postbox.errors import UnknownTopicError
from postbox.incident.dlq import Selection, read_dead_letters
from postbox.incident.lag import _partitions
from postbox.incident.trace import _find_records
from postbox.kafka_cluster import Kafka
from postbox.codec import AvroCodec

pytestmark = pytest.mark.integration


@pytest.fixture
def listed_then_deleted(settings, unique) -> Iterator[tuple[Kafka, str, str]]:
    """(a Kafka whose topic listing has both topics, the topic kept, the topic deleted since)."""
    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})
    keep, gone = f"outbox.event.vanish{unique}", f"outbox.event.vanished{unique}"
    for future in admin.create_topics([NewTopic(keep, 2, 1), NewTopic(gone, 2, 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap})
    for topic in (keep, gone):
        producer.produce(topic, b"not an event", key=b"k", partition=0)
    assert producer.flush(30) == 0
    kafka = Kafka(settings.kafka_bootstrap)
    deadline = time.monotonic() + 30
    while not {keep, gone} <= set(kafka.metadata(refresh=True).topics):
        assert time.monotonic() < deadline, "the new topics never showed in the metadata"
        time.sleep(0.2)
    for future in admin.delete_topics([gone]).values():
        future.result(30)
    deadline = time.monotonic() + 30
    while gone in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, "the deleted topic never left the metadata"
        time.sleep(0.2)
    try:
        yield kafka, keep, gone
    finally:
        kafka.close()
        admin.delete_topics([keep])


def test_a_listing_over_every_topic_leaves_the_deleted_one_out(listed_then_deleted) -> None:
    kafka, keep, gone = listed_then_deleted
    assert [(i.name, i.messages) for i in kafka.describe_topics([keep, gone])] == [(keep, 1)]


def test_trace_dlq_list_and_lag_go_through_the_topics_left(listed_then_deleted) -> None:
    kafka, keep, gone = listed_then_deleted
    _, scanned, complete = _find_records(kafka, [keep, gone], "no-such-id", None, 1_000, lambda *_: None, AvroCodec())
    assert (scanned, complete) == (1, True)
    letters, scanned, complete = read_dead_letters(kafka, [gone, keep], Selection(everything=True))
    assert (scanned, complete) == (1, True)
    assert [(p.topic, p.partition, p.end) for p in _partitions(kafka, {(gone, 0): 1, (keep, 0): 0})] == [(keep, 0, 1)]


def test_ranges_by_time_and_a_scan_leave_the_deleted_topic_out(listed_then_deleted) -> None:
    """The later requests of a read over every topic (offsets by time, then the scan itself) meet
    the deletion too: the topic is left out there as well, and the scan ends with the records of the
    topics left (it waited for the deleted partitions' records until it failed: "no records arrived")."""
    kafka, keep, gone = listed_then_deleted
    starts, ends = kafka.read_ranges([gone, keep], since_ms=0, until_ms=int(time.time() * 1000) + 60_000)
    assert (starts, ends) == ({(keep, 0): 0, (keep, 1): 0}, {(keep, 0): 1, (keep, 1): 0})
    read = list(kafka.scan({(gone, 0): 0, (keep, 0): 0}, {(gone, 0): 1, (keep, 0): 1}, max_records=10))
    assert [(m.topic(), m.offset()) for m in read] == [(keep, 0)]


def test_a_command_that_named_the_deleted_topic_says_so(listed_then_deleted) -> None:
    kafka, _keep, gone = listed_then_deleted
    with pytest.raises(UnknownTopicError, match=gone):
        kafka.watermarks(gone, [0, 1])
