"""A record whose handler keeps failing transiently is dead-lettered once its retry budget is spent
(``transient_retry_attempts`` / ``transient_retry_timeout``, as Kafka Connect's
``errors.retry.timeout``); without one it is retried for ever (test_consumer_handler_transient).
And a handler raising ``SystemExit`` fails its own event instead of ending the consumer.

Before: no budget existed (the partition stayed on the record for ever), and a handler's
``SystemExit`` escaped the invoker and stopped the consumer at every restart.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from postbox.consumer import App, ConsumerConfig, Retry
from postbox.effects import Effects
from postbox.events import Event
from tests.apps.counting import record
from tests.support.consumers import ThreadedRuntime, committed, create_topic, produce, read_all, router_headers, wait_for

pytestmark = pytest.mark.integration

app = App()
stuck_calls: list[float] = []


@app.handler("*", "Counted")
def counted(event: Event, fx: Effects) -> None:
    record(event, fx)


@app.handler("*", "Stuck")
def stuck(event: Event, fx: Effects) -> None:
    stuck_calls.append(time.monotonic())
    raise Retry("the ledger is being migrated")


@app.handler("*", "Exits")
def exits(event: Event, fx: Effects) -> None:
    raise SystemExit(2)


def _run(settings, unique: str, kinds: list[str], **budget) -> tuple[str, str, str]:
    agg = f"budget{unique}"
    topic, group = f"outbox.event.{agg}", f"test-budget-{unique}"
    create_topic(settings.kafka_bootstrap, topic, partitions=1)
    records = [(b"a", json.dumps({"seq": i + 1}).encode(), router_headers(str(uuid.uuid4()), kind, agg), 0)
               for i, kind in enumerate(kinds)]
    produce(settings.kafka_bootstrap, topic, records)
    config = ConsumerConfig.load(group=group, topics=topic, handler_retries=0, batch_wait_ms=50, backoff_base_ms=50,
                                 backoff_max_ms=200, **budget)
    runtime = ThreadedRuntime(app, config).start()
    try:
        wait_for(lambda: runtime.ok() and committed(settings.kafka_bootstrap, group, topic, 1) == {0: len(records)}, 60,
                 "the partition committed to its end")
    finally:
        runtime.stop()
    return agg, topic, group


@pytest.mark.parametrize("budget", [{"transient_retry_attempts": 3}, {"transient_retry_timeout": "1500ms"}])
def test_a_record_that_outlasts_its_retry_budget_is_dead_lettered_and_the_rest_flows(settings, redis_client, unique, budget):
    stuck_calls.clear()
    agg, topic, group = _run(settings, unique, ["Counted", "Stuck", "Counted"], **budget)

    assert [int(x) for x in redis_client.lrange(f"{{{agg}:a}}:seq", 0, -1)] == [1, 3]
    (letter,) = read_all(settings.kafka_bootstrap, f"{topic}.dlq", expect=1)
    headers = dict(letter.headers())
    assert headers["postbox.error.class"] == b"RetriesSpent:Retry"
    assert headers["postbox.origin.offset"] == b"1"
    assert b"the ledger is being migrated" in headers["postbox.error"]
    if "transient_retry_attempts" in budget:
        assert len(stuck_calls) == 3 and b"3 attempts" in headers["postbox.error"]
    else:
        assert stuck_calls[-1] - stuck_calls[0] >= 1.5
    redis_client.delete(f"{{{agg}:a}}:seq", f"{{{agg}:a}}:count", f"postbox:failures:{group}")


def test_a_handler_raising_systemexit_is_dead_lettered_and_the_consumer_goes_on(settings, redis_client, unique):
    agg, topic, group = _run(settings, unique, ["Counted", "Exits", "Counted"])
    assert [int(x) for x in redis_client.lrange(f"{{{agg}:a}}:seq", 0, -1)] == [1, 3]
    (letter,) = read_all(settings.kafka_bootstrap, f"{topic}.dlq", expect=1)
    assert dict(letter.headers())["postbox.error.class"] == b"SystemExit"
    redis_client.delete(f"{{{agg}:a}}:seq", f"{{{agg}:a}}:count", f"postbox:failures:{group}")
