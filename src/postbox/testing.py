"""Test your consumer handlers against a real Redis, without Kafka.

A handler is ``handler(event, fx) -> None``: it reads the :class:`~postbox.events.Event` and
describes its Redis changes on ``fx`` (an :class:`~postbox.effects.Effects`), sync or ``async def``.
The harness runs it the way the runtime does (:mod:`postbox.consumer.invoke`: async handlers to
completion on the harness's own event loop, a returned value refused by name),
applies the effects through the same engine and Lua script the consumer runtime uses, and lets
you look at the keys::

    from postbox.testing import EffectsHarness, make_event

    def test_paid_order_counts_once():
        with EffectsHarness() as h:                          # POSTBOX_REDIS_URL, else the local stack
            event = make_event("OrderPaid", {"cents": 500}, aggregate_type="order", aggregate_id="42")
            assert h.deliver(on_order_paid, event).applied
            assert h.deliver(on_order_paid, event).duplicate  # redelivery: applied once
            assert h.redis.hget("{order:42}:totals", "paid_cents") == b"500"

By default the harness is strict about hash slots (every key of one event in the slot of its
routing tag — its aggregate's, or the routing key the handler declares — as Redis Cluster
requires) and raises on failed effects, so a handler that passes here is cluster-ready. The
dedupe marker is the runtime's: a function of the group and the event, whatever the handler returns.
Leaving the ``with`` block deletes every key the delivered effects touched, plus the markers and
failure streams of its (unique) consumer group.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

import redis

from postbox.consumer import invoke
from postbox.consumer.app import App
from postbox.effects import ApplyResult, Effects, EffectsEngine, EventRef, RoutingKey, event_ref
from postbox.events import Event

Handler = Callable[[Event, Effects], Any]


def make_event(
    event_type: str,
    payload: Mapping[str, Any] | None = None,
    *,
    aggregate_type: str = "test",
    aggregate_id: str = "1",
    id: str | None = None,
    headers: Mapping[str, str] | None = None,
    topic: str | None = None,
    partition: int | None = 0,
    offset: int | None = None,
    created_at: datetime | None = None,
) -> Event:
    """An :class:`Event` with a fresh id (unless given) and the topic its aggregate type implies."""
    return Event(
        id=id or str(uuid.uuid4()),
        aggregate_type=aggregate_type,
        aggregate_id=aggregate_id,
        event_type=event_type,
        payload=dict(payload or {}),
        headers=dict(headers or {}),
        topic=topic or f"outbox.event.{aggregate_type}",
        partition=partition,
        offset=offset,
        created_at=created_at or datetime.now(timezone.utc),
    )


class EffectsHarness:
    """Deliver events to handlers and apply their effects to a real Redis.

    ``client``: a ``redis.Redis`` (bytes replies) or a URL; default ``POSTBOX_REDIS_URL`` / the
    local stack. ``group``: the consumer group the markers belong to (default: a unique one, so runs
    never see each other's markers). ``functions_dir``: the user effect functions (default:
    ``POSTBOX_LUA_DIR``, else ``./consumers/lua``). ``strict_slots``: refuse effects whose keys span hash slots.
    """

    def __init__(
        self,
        client: redis.Redis | str | None = None,
        *,
        group: str | None = None,
        functions_dir: Path | str | None = "default",
        strict_slots: bool = True,
    ) -> None:
        if client is None:
            from postbox.settings import Settings
            from postbox.stack.addresses import local_stack_env  # the test harness may know the stack

            client = Settings.load(local=local_stack_env()).redis_url
        self._own_client = isinstance(client, str)
        if isinstance(client, str):
            from postbox.redis_client import connect  # rediss:// and redis+cluster:// as everywhere

            client = connect(client)  # type: ignore[assignment]
        self.redis: redis.Redis = client
        self.group = group or f"test-{uuid.uuid4().hex[:12]}"
        self.engine = EffectsEngine(self.redis, self.group, functions_dir=functions_dir, strict_slots=strict_slots)
        self.touched: set[bytes] = set()
        self.results: list[ApplyResult] = []
        self._loop: asyncio.Runner | None = None

    def effects_of(self, handler: Handler, event: Event) -> Effects:
        """Run the handler and return the effects it described, without touching Redis.

        The runtime's own path (:mod:`postbox.consumer.invoke`): an ``async def`` handler is run to
        completion on this harness's event loop (one for its lifetime, like the consumer's), an
        :class:`~postbox.consumer.App` dispatches to the route's handler, and a handler returning
        anything but None raises :class:`~postbox.consumer.invoke.HandlerResultError`."""
        if isinstance(handler, App):
            route = handler.route(event.aggregate_type, event.event_type)
            return invoke.run(route.handler, event, name=route.name, runner=self._runner())
        return invoke.run(handler, event, runner=self._runner())

    def _runner(self) -> asyncio.Runner:
        if self._loop is None:
            self._loop = asyncio.Runner()
        return self._loop

    def ref_of(self, handler: Handler, event: Event, routing_key: RoutingKey | None = None) -> EventRef:
        """The event's identity as the runtime makes it: an :class:`~postbox.consumer.App` routes by
        its registration's routing key; a plain handler by ``routing_key`` (default: the aggregate)."""
        app_ref = getattr(handler, "event_ref", None)
        if routing_key is None and callable(app_ref):
            return app_ref(event)
        return event_ref(event, routing_key)

    def deliver(
        self, handler: Handler, event: Event, *, check: bool = True, routing_key: RoutingKey | None = None
    ) -> ApplyResult:
        """Run ``handler(event, fx)`` and apply ``fx`` once for the event.

        Returns the :class:`ApplyResult` (``applied``/``duplicate``/``failed``). With ``check``
        (default) a failed apply raises :class:`~postbox.effects.PermanentEffectError` naming the
        command and the Redis error. A handler exception propagates unchanged. ``routing_key``:
        the one the handler is registered with (an ``App`` knows its own).
        """
        fx = self.effects_of(handler, event)
        ref = self.ref_of(handler, event, routing_key)
        self._touch(ref, fx)
        result = self.engine.apply_one(ref, fx)
        self.results.append(result)
        return result.raise_for_failure() if check else result

    def deliver_all(
        self, handler: Handler, events: Iterable[Event], *, check: bool = True, routing_key: RoutingKey | None = None
    ) -> list[ApplyResult]:
        """Deliver several events in one batch (as the runtime does), in order."""
        batch = []
        for event in events:
            fx = self.effects_of(handler, event)
            ref = self.ref_of(handler, event, routing_key)
            self._touch(ref, fx)
            batch.append((ref, fx))
        results = self.engine.apply(batch)
        self.results.extend(results)
        if check:
            for result in results:
                result.raise_for_failure()
        return results

    def _touch(self, ref: EventRef, fx: Effects) -> None:
        self.touched.update(fx.keys())
        self.touched.add(self.engine.marker_key(ref))
        self.touched.add(self.engine.failures_key(ref))

    def failures(self) -> list[dict[str, str]]:
        """The failure records of this harness's group (newest last), decoded."""
        out: list[dict[str, str]] = []
        for key in sorted(k for k in self.touched if k.endswith(b":failures:" + self.group.encode())):
            for _id, fields in self.redis.xrange(key):
                out.append({k.decode(): v.decode("utf-8", "replace") for k, v in fields.items()})
        return out

    def cleanup(self) -> None:
        """Delete every key the delivered effects touched, and this group's markers."""
        keys = sorted(self.touched)
        for start in range(0, len(keys), 500):
            self.redis.delete(*keys[start : start + 500])
        self.touched.clear()

    def close(self) -> None:
        self.cleanup()
        if self._loop is not None:
            self._loop.close()
            self._loop = None
        if self._own_client:
            self.redis.close()

    def __enter__(self) -> "EffectsHarness":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
