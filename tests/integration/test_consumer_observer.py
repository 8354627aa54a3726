"""The consumer's observer on the real services: every record of a topic is reported once with its
outcome — applied, dead-lettered (a handler that always raises) — with its event id, where it was
read, its created_at and its Kafka timestamp; the same records delivered again are reported as duplicates. This
is what the end-to-end bench counts with, so a record applied but not reported would make it
count short."""

from __future__ import annotations

import time
import uuid

import pytest

from postbox.consumer import ConsumerConfig, Observed
from postbox.consumer.observation import APPLIED, DEAD_LETTERED, DUPLICATE
from tests.apps.counting import strict
from tests.support.consumers import ThreadedRuntime, create_topic, json_event, produce, read_all, wait_for

pytestmark = pytest.mark.integration


def test_each_record_is_reported_once_with_its_outcome_and_again_as_a_duplicate(settings, unique):
    agg = f"obs{unique}"
    topic = f"outbox.event.{agg}"
    create_topic(settings.kafka_bootstrap, topic, partitions=2)
    ids = [str(uuid.uuid4()) for _ in range(7)]
    records = [json_event(agg, f"a{i % 3}", "Counted", i, event_id=ids[i], partition=i % 2) for i in range(6)]
    records.append(json_event(agg, "a0", "Boom", 6, event_id=ids[6], partition=0))  # dead-lettered
    before = time.time()
    produce(settings.kafka_bootstrap, topic, records)
    seen: list[Observed] = []
    config = ConsumerConfig.load(group=f"test-obs-{unique}", topics=topic, handler_retries=0, batch_wait_ms=50)
    runtime = ThreadedRuntime(strict, config, observer=seen.extend).start()
    try:
        wait_for(lambda: runtime.ok() and len(seen) >= 7, 60, "seven records observed")
        first = list(seen)
        originals = read_all(settings.kafka_bootstrap, topic, expect=7)
        produce(settings.kafka_bootstrap, topic, [(m.key(), m.value(), m.headers(), m.partition()) for m in originals])
        wait_for(lambda: runtime.ok() and len(seen) >= 14, 60, "the redelivered records observed")
    finally:
        runtime.stop()

    outcomes = {o.event_id: o.outcome for o in first}
    assert len(first) == 7 and outcomes == {**{eid: APPLIED for eid in ids[:6]}, ids[6]: DEAD_LETTERED}
    assert sorted((o.partition, o.offset) for o in first) == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2)]
    for o in first:
        assert o.topic == topic
        assert o.created_at is not None and o.created_at.timestamp() <= o.acknowledged
        assert o.kafka_timestamp_ms is not None and o.kafka_timestamp_ms / 1000 >= before - 1
        assert o.kafka_timestamp_ms / 1000 <= o.batch_received + 1 and o.batch_received <= o.acknowledged
    again = seen[7:]
    # The Boom record fails again (its handler raises whatever the dedupe says: a failure of an
    # event never applied is dead-lettered again); every applied one is a duplicate now.
    assert len(again) == 7 and {o.event_id: o.outcome for o in again} == {**{eid: DUPLICATE for eid in ids[:6]}, ids[6]: DEAD_LETTERED}
