"""Test apps for the consumer runtime's integration tests and the bench.

``app``: one catch-all that records, per aggregate, the sequence numbers it sees (``payload["seq"]``,
or ``total_cents`` for order events) in ``{<aggregate_type>:<aggregate_id>}:seq`` (a list: order
and exactly-once are visible at once) and counts them in ``...:count``.

``strict``: typed handlers for the failure tests — ``Counted`` (like ``app``), ``AsyncCounted``
(async), ``RoutedCounted`` (counts under ``{customer:<payload customer>}``, its declared routing
key, so its markers carry that tag, not the aggregate's), ``Boom`` (always raises ValueError), ``Flaky`` (raises on its first attempt per event in
this process, then counts), ``Clash`` (pushes, then HSETs ``...:str``, which the test made a string:
WRONGTYPE at command 1, so the push is undone). No catch-all: other event types are unknown.

``POSTBOX_TEST_SLEEP_MS`` slows every counting handler down. ``POSTBOX_TEST_HOLD_IN_HANDLER=<path>``:
when a file exists at ``<path>``, the next ``audited`` handler call claims it (renames it to
``<path>.held`` and writes its pid and event id there) and sleeps until the process is killed: the
fault suite's deterministic "SIGKILL while the batch's handlers run" (the runtime's twin for
"after the apply, before the commit" is ``postbox.consumer.testhooks``).
"""

from __future__ import annotations

import asyncio
import json
import os
import time

from postbox.consumer import App
from postbox.effects import Effects, aggregate_keys
from postbox.events import Event

_SLEEP = float(os.environ.get("POSTBOX_TEST_SLEEP_MS", "0")) / 1000
_HOLD_IN_HANDLER = os.environ.get("POSTBOX_TEST_HOLD_IN_HANDLER", "")


def _hold_if_armed(event: Event) -> None:
    if not _HOLD_IN_HANDLER:
        return
    held = _HOLD_IN_HANDLER + ".held"
    try:
        os.rename(_HOLD_IN_HANDLER, held)  # atomic: one process of a group claims it
    except FileNotFoundError:
        return
    with open(held + ".tmp", "w") as out:
        json.dump({"pid": os.getpid(), "event_id": event.id, "aggregate_id": event.aggregate_id,
                   "partition": event.partition, "offset": event.offset}, out)
    os.replace(held + ".tmp", held)  # the fault suite reads a complete file or the empty claim
    while True:  # until SIGKILL
        time.sleep(1)


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


@strict.handler("*", "RoutedCounted", routing_key=lambda e: aggregate_keys("customer", e.payload["customer"])())
def routed_counted(event: Event, fx: Effects) -> None:
    fx.rpush(aggregate_keys("customer", event.payload["customer"])("seq"), seq_of(event))


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
# Events the fault suite marks through their ``customer_id`` fail on purpose: ``poison:...`` always
# (a handler bug: the event must be dead-lettered), ``flaky:...`` on its first attempt in a process.
audited = App()
_failed_once: set[str] = set()


def _fail_if_marked(event: Event) -> None:
    customer = str(event.payload.get("customer_id", ""))
    if customer.startswith("poison:"):
        raise ValueError(f"poison event {event.id}: this handler always fails on it")
    if customer.startswith("flaky:") and event.id not in _failed_once:
        _failed_once.add(event.id)
        raise ValueError(f"flaky event {event.id}: fails on its first attempt in this process")


@audited.catch_all
def count_and_audit(event: Event, fx: Effects) -> None:
    _hold_if_armed(event)
    _fail_if_marked(event)
    if _SLEEP:
        time.sleep(_SLEEP)
    record(event, fx)
    fx.hincrby(aggregate_keys(event.aggregate_type, event.aggregate_id)("applied"), event.id, 1)


# ``audited_v2``: ``audited`` as a later deploy might write it — the same facts recorded in another
# order, under another key set (a per-type tally first, outside the aggregate's hash tag). Between
# a SIGKILL and the restart the fault suite swaps ``audited`` for this: a redelivered event must
# still meet its dedupe marker (#12.1: the marker belongs to the group and the event, never to the
# effects a handler returns).
audited_v2 = App()


@audited_v2.catch_all
def audit_then_count(event: Event, fx: Effects) -> None:
    _hold_if_armed(event)
    _fail_if_marked(event)
    if _SLEEP:
        time.sleep(_SLEEP)
    fx.hincrby(f"{{{event.aggregate_type}}}:v2:tally", "n", 1)
    k = aggregate_keys(event.aggregate_type, event.aggregate_id)
    fx.hincrby(k("applied"), event.id, 1)
    fx.hincrby(k("count"), "n", 1)
    fx.rpush(k("seq"), seq_of(event))
