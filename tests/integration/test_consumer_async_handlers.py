"""#14.1: ``async def`` handlers really run and their effects are applied exactly once — through the
real runtime against the stack and through ``postbox.testing`` — and a handler returning a value
gets a clear failure naming it.

On the main this was written against, the harness called an async handler, dropped its coroutine
and reported APPLIED with no effects (only a RuntimeWarning), and a handler returning a value was
not noticed by the runtime, ``App.__call__`` or the harness.
"""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from postbox.consumer import App, ConsumerConfig
from postbox.consumer.invoke import HandlerResultError
from postbox.effects import Effects, aggregate_keys
from postbox.events import Event
from postbox.testing import EffectsHarness, make_event
from tests.apps.counting import record
from tests.support.consumers import ThreadedRuntime, committed, create_topic, produce, read_all, router_headers, wait_for

pytestmark = pytest.mark.integration

app = App(require_schemas=False)


@app.handler("*", "Counted")
async def counted_later(event: Event, fx: Effects) -> None:
    await asyncio.sleep(0.001)  # a real suspension: the effects are described after it
    record(event, fx)


@app.handler("*", "Returns")
def returns_a_value(event: Event, fx: Effects) -> dict:
    record(event, fx)
    return {"seq": event.payload["seq"]}  # a mistake: these effects must not be applied silently


def test_async_handler_applied_exactly_once_by_the_runtime_and_a_returned_value_dead_lettered(settings, redis_client, unique):
    agg = f"async{unique}"
    topic = f"outbox.event.{agg}"
    group = f"test-async-{unique}"
    create_topic(settings.kafka_bootstrap, topic, partitions=2)
    ids = [str(uuid.uuid4()) for _ in range(40)]
    records = [(f"a{i % 4}".encode(), json.dumps({"seq": i}).encode(), router_headers(eid, "Counted", agg), i % 2) for i, eid in enumerate(ids)]
    returns = (b"r", json.dumps({"seq": 99}).encode(), router_headers(str(uuid.uuid4()), "Returns", agg), 0)
    redelivered = records[:15]  # the same ids again: duplicates
    produce(settings.kafka_bootstrap, topic, records + [returns] + redelivered)
    config = ConsumerConfig.load(group=group, topics=topic, batch_size=16, batch_wait_ms=20, handler_retries=0)
    runtime = ThreadedRuntime(app, config).start()
    try:
        ends = {0: 20 + 1 + 8, 1: 20 + 7}  # a0, a2 and r on partition 0; a1, a3 on 1
        wait_for(lambda: runtime.ok() and committed(settings.kafka_bootstrap, group, topic, 2) == ends, 90, "every record committed")
    finally:
        runtime.stop()
    for n in range(4):
        keys = aggregate_keys(agg, f"a{n}")
        assert [int(x) for x in redis_client.lrange(keys("seq"), 0, -1)] == list(range(n, 40, 4))  # once each, in order
    assert runtime.metrics.total("postbox_consumer_duplicates_skipped_total") == len(redelivered)
    assert redis_client.lrange(aggregate_keys(agg, "r")("seq"), 0, -1) == []
    letters = read_all(settings.kafka_bootstrap, f"{topic}.dlq", expect=1)
    headers = dict(letters[0].headers())
    assert headers["postbox.error.class"] == b"HandlerResultError"
    assert b"returns_a_value returned {'seq': 99} (dict)" in headers["postbox.error"]
    redis_client.delete(*[aggregate_keys(agg, f"a{n}")(s) for n in range(4) for s in ("seq", "count")], f"postbox:failures:{group}")


def test_async_handler_applied_exactly_once_by_the_harness(settings):
    aggregate_id = uuid.uuid4().hex[:8]
    event = make_event("Counted", {"seq": 7}, aggregate_type="harness", aggregate_id=aggregate_id)
    keys = aggregate_keys("harness", aggregate_id)
    with EffectsHarness(settings.redis_url, cleanup=True) as h:
        assert h.deliver(counted_later, event).applied
        assert h.deliver(app, event).duplicate  # the App dispatches to the same async handler
        assert h.redis.lrange(keys("seq"), 0, -1) == [b"7"]
        second = make_event("Counted", {"seq": 8}, aggregate_type="harness", aggregate_id=aggregate_id)
        assert [r.applied for r in h.deliver_all(app, [second])] == [True]
        assert h.redis.lrange(keys("seq"), 0, -1) == [b"7", b"8"]
        with pytest.raises(HandlerResultError, match="returns_a_value returned"):
            h.deliver(app, make_event("Returns", {"seq": 1}, aggregate_type="harness", aggregate_id=aggregate_id))
