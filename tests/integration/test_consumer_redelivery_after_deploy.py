"""A handler changed between delivery and redelivery that now *raises* on an event the group
already applied: the redelivery is a duplicate, not a poison record.

Before, handlers ran before the dedupe check, so the new handler's exception dead-lettered an
event that had taken effect: a dead letter (and an alert) for nothing, and an operator replaying
it found nothing to fix. Now a handler failure is checked against the group's marker before it is
dead-lettered. A failing event the group never applied is still dead-lettered (the check must not
swallow real failures).

Shown to fail: with ``Pipeline._not_applied_before`` bypassed (scratch edit, not committed) the
re-sent event was dead-lettered: two dead letters instead of one, and no duplicate counted.
"""

from __future__ import annotations

import uuid

import pytest

from postbox.consumer import App, ConsumerConfig
from postbox.effects import Effects
from postbox.events import Event
from tests.apps.counting import record, seq_of, strict
from tests.support.consumers import ThreadedRuntime, committed, create_topic, json_event, produce, read_all, wait_for

pytestmark = pytest.mark.integration

#: The next deploy: its ``Counted`` handler cannot read events older than seq 3 any more.
deployed = App()


@deployed.handler("*", "Counted")
def counted_v2(event: Event, fx: Effects) -> None:
    if seq_of(event) < 3:
        raise ValueError(f"v2 cannot handle seq {seq_of(event)} of {event.id}")
    record(event, fx)


def run_until_committed(app: App, group: str, topic: str, bootstrap: str, offset: int) -> ThreadedRuntime:
    config = ConsumerConfig.load(group=group, topics=topic, batch_wait_ms=50)
    runtime = ThreadedRuntime(app, config).start()
    try:
        wait_for(lambda: runtime.ok() and committed(bootstrap, group, topic, 1) == {0: offset}, 60, f"offset {offset} committed")
    finally:
        runtime.stop()
    return runtime


def test_a_redelivered_event_whose_new_handler_raises_is_a_duplicate_not_a_dead_letter(settings, redis_client, unique):
    agg = f"redeploy{unique}"
    topic = f"outbox.event.{agg}"
    group = f"test-redeploy-{unique}"
    create_topic(settings.kafka_bootstrap, topic, partitions=1)
    applied_id, never_applied_id, later_id = (str(uuid.uuid4()) for _ in range(3))
    first = json_event(agg, "a1", "Counted", 1, event_id=applied_id, partition=0)
    produce(settings.kafka_bootstrap, topic, [first])
    run_until_committed(strict, group, topic, settings.kafka_bootstrap, 1)

    # Debezium re-sends the applied event (a restart before its offsets were flushed); then a new
    # event the deployed handler also fails on, and one it handles.
    produce(settings.kafka_bootstrap, topic, [
        first,
        json_event(agg, "a1", "Counted", 2, event_id=never_applied_id, partition=0),
        json_event(agg, "a1", "Counted", 3, event_id=later_id, partition=0),
    ])
    runtime = run_until_committed(deployed, group, topic, settings.kafka_bootstrap, 4)

    assert [int(x) for x in redis_client.lrange(f"{{{agg}:a1}}:seq", 0, -1)] == [1, 3]
    dead = read_all(settings.kafka_bootstrap, f"{topic}.dlq", expect=1)
    assert [dict(m.headers())["id"].decode() for m in dead] == [never_applied_id], "only the event never applied is dead-lettered"
    assert runtime.metrics.total("postbox_consumer_duplicates_skipped_total") == 1
    assert runtime.metrics.total("postbox_consumer_dead_lettered_total") == 1
