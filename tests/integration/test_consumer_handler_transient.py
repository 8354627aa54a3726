"""#12.10: transient errors of a handler's own dependencies are retried with backoff, not dead-lettered.

Each flaky handler fails its first four calls per event — more than ``1 + handler_retries`` (3)
in-place attempts — the way a dependency that is down for a while does. On the main this was
written against, the built-in ``ConnectionError`` and the HTTP 503 were dead-lettered as
``HandlerError`` after ~100 ms of in-place retries, and a handler had no way to declare its own
transient errors (``transient=``, ``postbox.consumer.Retry`` did not exist).
"""

from __future__ import annotations

import json
import uuid
from collections import Counter

import httpx
import pytest

from postbox.consumer import App, ConsumerConfig, Retry
from postbox.effects import Effects
from postbox.events import Event
from tests.apps.counting import record
from tests.support.consumers import ThreadedRuntime, committed, create_topic, produce, read_all, router_headers, wait_for

pytestmark = pytest.mark.integration

FAILING_CALLS = 4
calls: Counter[str] = Counter()


class QuotaExceeded(Exception):
    """A dependency's own 'try later' error, declared transient by the handler."""


def _still_down(event: Event) -> bool:
    calls[event.id] += 1
    return calls[event.id] <= FAILING_CALLS


def _response(status: int) -> None:
    httpx.Response(status, request=httpx.Request("GET", "http://ledger.internal/accounts/1")).raise_for_status()


app = App()


@app.handler("*", "Counted")
def counted(event: Event, fx: Effects) -> None:
    record(event, fx)


@app.handler("*", "Socket")
def socket_down(event: Event, fx: Effects) -> None:
    if _still_down(event):
        raise ConnectionError("[Errno 111] Connection refused")
    record(event, fx)


@app.handler("*", "Http503")
async def http_503(event: Event, fx: Effects) -> None:
    if _still_down(event):
        _response(503)
    record(event, fx)


@app.handler("*", "Quota", transient=(QuotaExceeded,))
def quota(event: Event, fx: Effects) -> None:
    if _still_down(event):
        raise QuotaExceeded("429-like: quota exhausted until the next minute")
    record(event, fx)


@app.handler("*", "Later")
def later(event: Event, fx: Effects) -> None:
    if _still_down(event):
        raise Retry("the ledger is being migrated")
    record(event, fx)


@app.handler("*", "NotFound")
def not_found(event: Event, fx: Effects) -> None:
    _response(404)  # a 404 does not heal by waiting: dead-lettered


def test_dependency_outages_are_retried_with_backoff_in_order_and_never_dead_lettered(settings, redis_client, unique):
    agg = f"flaky{unique}"
    topic = f"outbox.event.{agg}"
    group = f"test-flaky-{unique}"
    create_topic(settings.kafka_bootstrap, topic, partitions=1)
    kinds = ["Counted", "Socket", "Http503", "Quota", "Later", "Counted", "NotFound", "Counted"]
    records = [(b"a", json.dumps({"seq": i + 1}).encode(), router_headers(str(uuid.uuid4()), kind, agg), 0) for i, kind in enumerate(kinds)]
    produce(settings.kafka_bootstrap, topic, records)
    config = ConsumerConfig.load(group=group, topics=topic, handler_retries=2, batch_wait_ms=50, backoff_base_ms=50, backoff_max_ms=200)
    runtime = ThreadedRuntime(app, config).start()
    try:
        wait_for(lambda: runtime.ok() and committed(settings.kafka_bootstrap, group, topic, 1) == {0: len(records)}, 90,
                 "the partition committed to its end")
    finally:
        runtime.stop()

    # Every flaky event applied once, in its place; only the 404 was dead-lettered.
    assert [int(x) for x in redis_client.lrange(f"{{{agg}:a}}:seq", 0, -1)] == [1, 2, 3, 4, 5, 6, 8]
    letters = read_all(settings.kafka_bootstrap, f"{topic}.dlq", expect=1)
    assert [dict(m.headers())["postbox.error.class"] for m in letters] == [b"HandlerError:HTTPStatusError"]
    assert dict(letters[0].headers())["postbox.origin.offset"] == b"6"
    # Each outage outlasted the in-place retries (4 failing calls > 3 attempts) ...
    assert len(calls) == 4 and all(n >= FAILING_CALLS + 1 for n in calls.values()), calls
    # ... and was retried as a transient failure of the partition (paused, resumed), not in place.
    assert runtime.metrics.value("postbox_consumer_retries_total", reason="handler") >= 4
    redis_client.delete(f"{{{agg}:a}}:seq", f"{{{agg}:a}}:count", f"postbox:failures:{group}")
