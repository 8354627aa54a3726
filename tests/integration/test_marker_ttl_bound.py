"""#12.2: the marker TTL bound, enforced by `postbox doctor` and holding under offsets expiry.

Scaled down: a topic kept 20 s with 5 s segments instead of 7 days and 12 hours. Each group's
marker TTL comes from the registry the engine publishes in Redis (``postbox.effects.groups``);
doctor compares it with the topics the group consumes and the broker's settings. Before the fix
doctor had no such check (and the shipped segment roll let records outlive 8-day markers).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from postbox.consumer import ConsumerConfig
from postbox.effects import groups as group_registry
from tests.apps.counting import app as counting_app
from tests.support.consumers import (
    ThreadedRuntime,
    committed,
    json_event,
    produce,
    wait_for,
)

pytestmark = pytest.mark.integration
RETENTION_MS, SEGMENT_MS = 20_000, 5_000
EVENTS = 12


@pytest.fixture
def short_topic(settings) -> Iterator[str]:
    topic = f"outbox.event.t12x2{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})
    config = {"retention.ms": str(RETENTION_MS), "segment.ms": str(SEGMENT_MS)}
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1, config=config)])[topic].result(timeout=30)
    yield topic
    admin.delete_topics([topic])[topic].result(timeout=30)


@pytest.fixture
def registered(redis_client) -> Iterator[list[str]]:
    """Groups this test publishes in the registry; removed afterwards, so the stack's doctor stays healthy."""
    names: list[str] = []
    yield names
    if names:
        redis_client.hdel(group_registry.registry_key(), *names)


def commit_on(bootstrap: str, group: str, topic: str) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        consumer.close()


def doctor_checks() -> dict[str, dict]:
    done = subprocess.run([sys.executable, "-m", "postbox", "doctor", "--json"], check=False, capture_output=True, text=True, timeout=120)
    assert done.stdout.startswith("{"), done.stderr
    return {c["check"]: c for c in json.loads(done.stdout)["checks"]}


def test_doctor_fails_a_group_whose_marker_ttl_is_shorter_than_the_window(settings, redis_client, short_topic, registered) -> None:
    short, safe = f"t12x2-short-{uuid.uuid4().hex[:6]}", f"t12x2-safe-{uuid.uuid4().hex[:6]}"
    registered += [short, safe]
    for group in (short, safe):
        commit_on(settings.kafka_bootstrap, group, short_topic)  # the topics a group consumes decide its window
    group_registry.publish(redis_client, short, timedelta(seconds=10))
    group_registry.publish(redis_client, safe, timedelta(days=8))

    checks = doctor_checks()
    failed = checks[f"marker TTL {short}"]
    assert failed["status"] == "fail"
    for number in (f"group {short}", "marker TTL 10s", short_topic, "retention.ms 20s", "segment.ms 5s",
                   "log.retention.check.interval.ms 5m", "offsets.retention.minutes 7d"):
        assert number in failed["detail"], (number, failed["detail"])
    assert "POSTBOX_MARKER_TTL" in failed["fix"]
    assert checks[f"marker TTL {safe}"]["status"] == "ok", checks[f"marker TTL {safe}"]

    group_registry.publish(redis_client, short, timedelta(days=8))  # the fix the check names
    assert doctor_checks()[f"marker TTL {short}"]["status"] == "ok"


def test_a_group_idle_past_its_offsets_is_applied_nothing_twice(settings, redis_client, short_topic, registered) -> None:
    """The scenario the bound protects: the group's offsets expire (offsets.retention.minutes after
    it went empty; here deleted the way the broker deletes them) and it re-reads every record still
    in the log from the earliest offset. Its markers outlive the window, so nothing is applied again."""
    group = f"t12x2-idle-{uuid.uuid4().hex[:6]}"
    registered.append(group)
    agg = short_topic.removeprefix("outbox.event.")
    produce(settings.kafka_bootstrap, short_topic, [json_event(agg, f"a{i % 3}", "Counted", i) for i in range(EVENTS)])
    config = ConsumerConfig.load(group=group, topics=short_topic, batch_wait_ms=50, marker_ttl=timedelta(days=8))

    def count() -> int:
        return sum(int(redis_client.hget(f"{{{agg}:a{i}}}:count", "n") or 0) for i in range(3))


    first = ThreadedRuntime(counting_app, config).start()
    try:
        wait_for(lambda: first.ok() and sum(o for o in committed(settings.kafka_bootstrap, group, short_topic, 2).values() if o > 0) == EVENTS,
                 60, "every event applied and committed")
    finally:
        first.stop()
    group_registry.publish(redis_client, group, config.marker_ttl)
    assert count() == EVENTS

    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})

    admin.delete_consumer_groups([group])[group].result(timeout=30)  # what offsets expiry does to an empty group
    assert all(o < 0 for o in committed(settings.kafka_bootstrap, group, short_topic, 2).values())

    second = ThreadedRuntime(counting_app, config).start()
    try:
        wait_for(lambda: second.ok() and sum(o for o in committed(settings.kafka_bootstrap, group, short_topic, 2).values() if o > 0) == EVENTS,
                 60, "every record re-read from the earliest offset and committed again")
        duplicates = second.metrics.duplicates.labels(group=group, topic=short_topic)._value.get()
    finally:
        second.stop()
    assert count() == EVENTS  # nothing applied twice
    assert duplicates == EVENTS  # every record came back, and met its marker
    assert doctor_checks()[f"marker TTL {group}"]["status"] == "ok"
