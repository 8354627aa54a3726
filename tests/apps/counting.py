"""Test apps for the consumer runtime's integration tests and the bench.

``app``: one catch-all that records, per aggregate, the sequence numbers it sees (``payload["seq"]``,
or ``total_cents`` for order events) in ``{<aggregate_type>:<aggregate_id>}:seq`` (a list: order
and exactly-once are visible at once) and counts them in ``...:count``.

``strict``: typed handlers for the failure tests — ``Counted`` (like ``app``), ``AsyncCounted``
(async), ``Boom`` (always raises ValueError), ``Flaky`` (raises on its first attempt per event in
this process, then counts), ``Clash`` (pushes, then HSETs ``...:str``, which the test made a string:
WRONGTYPE at command 1, so the push is undone). No catch-all: other event types are unknown.

``POSTBOX_TEST_SLEEP_MS`` slows every counting handler down (to kill a consumer mid-batch).
"""

from __future__ import annotations

import asyncio
import os
import time

from postbox.consumer import App
from postbox.effects import Effects, aggregate_keys
from postbox.events import Event

_SLEEP = float(os.environ.get("POSTBOX_TEST_SLEEP_MS", "0")) / 1000


def seq_of(event: Event) -> int:
    payload = event.payload
    return int(payload["seq"] if "seq" in payload else payload["total_cents"])


def record(event: Event, fx: Effects) -> None:
    k = aggregate_keys(event.aggregate_type, event.aggregate_id)
    fx.rpush(k("seq"), seq_of(event))
    fx.hincrby(k("count"), "n", 1)


app = App()


@app.catch_all
def count(event: Event, fx: Effects) -> None:
    if _SLEEP:
        time.sleep(_SLEEP)
    record(event, fx)


strict = App()
_flaky_seen: set[str] = set()


@strict.handler("*", "Counted")
def counted(event: Event, fx: Effects) -> None:
    record(event, fx)


@strict.handler("*", "AsyncCounted")
async def async_counted(event: Event, fx: Effects) -> None:
    await asyncio.sleep(0)
    record(event, fx)


@strict.handler("*", "Boom")
def boom(event: Event, fx: Effects) -> None:
    fx.rpush(aggregate_keys(event.aggregate_type, event.aggregate_id)("seq"), seq_of(event))
    raise ValueError(f"boom on {event.id}")


@strict.handler("*", "Flaky")
def flaky(event: Event, fx: Effects) -> None:
    if event.id not in _flaky_seen:
        _flaky_seen.add(event.id)
        raise RuntimeError("first attempt fails")
    record(event, fx)


@strict.handler("*", "Clash")
def clash(event: Event, fx: Effects) -> None:
    k = aggregate_keys(event.aggregate_type, event.aggregate_id)
    fx.rpush(k("seq"), seq_of(event))
    fx.hset(k("str"), "field", "value")


# ``audited``: the fault suite's handler. Like ``app`` (sequence list + count per aggregate), plus a
# per-event apply counter ``{<aggregate_type>:<aggregate_id>}:applied`` (event id → times applied):
# a double application shows as 2 on the very event, even if the sequence list were rebuilt.
audited = App()


@audited.catch_all
def count_and_audit(event: Event, fx: Effects) -> None:
    if _SLEEP:
        time.sleep(_SLEEP)
    record(event, fx)
    fx.hincrby(aggregate_keys(event.aggregate_type, event.aggregate_id)("applied"), event.id, 1)
