"""The effects harness: handlers run as the runtime runs them, effects applied to a real Redis
(the guide is the package's docstring, :mod:`postbox.testing`)."""

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
from postbox.consumer.emulated import SchemaGate, SchemasSetting
from postbox.payloads.instance import as_mapping
from postbox.effects import ApplyResult, Effects, EffectsEngine, EventRef, RoutingKey
from postbox.events import Event
from postbox.testing.server import RedisServer
from postbox.topics import topic_for

Handler = Callable[[Event, Effects], Any]


def make_event(
    event_type: str,
    payload: Any = None,
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
    """An :class:`Event` with a fresh id (unless given) and the topic its aggregate type implies.

    ``payload``: a mapping, or an instance of a payload class (``postbox schemas codegen``'s), which
    is turned into its mapping as the writer would encode it."""
    return Event(
        id=id or str(uuid.uuid4()),
        aggregate_type=aggregate_type,
        aggregate_id=aggregate_id,
        event_type=event_type,
        payload=dict(as_mapping(payload) or {}),
        headers=dict(headers or {}),
        topic=topic or topic_for(aggregate_type),
        partition=partition,
        offset=offset,
        created_at=created_at or datetime.now(timezone.utc),
    )


class EffectsHarness:
    """Deliver events to handlers and apply their effects to a real Redis.

    ``client``: a ``redis.Redis`` (bytes replies) or a URL; default: a private redis-server the
    harness starts (:class:`~postbox.testing.RedisServer`) and stops on :meth:`close`, never a
    Redis named by ``POSTBOX_REDIS_URL``. ``cleanup``: on :meth:`close`, delete the keys the
    delivered effects touched; default only on the harness's own server (gone anyway) — on a
    Redis it did not start nothing is deleted unless ``cleanup=True`` says that Redis is the
    tests' (a deleted ``{order:42}:totals`` there may be a real order's). ``group``: the consumer group the markers belong to (default: a unique one, so runs
    never see each other's markers). ``functions_dir``: the user effect functions (default:
    ``POSTBOX_LUA_DIR``, else none). ``cluster``: True holds effects to Redis
    Cluster's one-slot rule on any Redis (your production runs on a Cluster), False never, None
    (default) when the client is a Cluster client. ``schemas_dir``: the folder test events are held
    to (default: the app's, else ``POSTBOX_SCHEMAS_DIR``, else ``./schemas`` if present; False: none).
    """

    def __init__(
        self,
        client: redis.Redis | str | None = None,
        *,
        group: str | None = None,
        functions_dir: Path | str | None = "default",
        cluster: bool | None = None,
        schemas_dir: SchemasSetting = None,
        cleanup: bool | None = None,
    ) -> None:
        self._server: RedisServer | None = None
        if client is None:
            self._server = RedisServer().start()
            client = self._server.url
        self._cleanup_on_close = cleanup if cleanup is not None else self._server is not None
        self._own_client = isinstance(client, str)
        if isinstance(client, str):
            from postbox.redis_client import connect  # rediss:// and redis+cluster:// as everywhere

            client = connect(client)  # type: ignore[assignment]
        self.redis: redis.Redis = client
        self.group = group or f"test-{uuid.uuid4().hex[:12]}"
        self.engine = EffectsEngine(self.redis, self.group, functions_dir=functions_dir, strict_slots=cluster)
        self.touched: set[bytes] = set()
        self.results: list[ApplyResult] = []
        self._loop: asyncio.Runner | None = None
        self._schemas = schemas_dir
        self._gates: dict[int, SchemaGate] = {}
        self._apps: dict[tuple[int, str, str, int], App] = {}

    def effects_of(self, handler: Handler, event: Event) -> Effects:
        """Run the handler on the event as production would deliver it and return the effects it
        described, without touching Redis (:func:`effects_of` needs no harness at all).

        The runtime's own path (:mod:`postbox.consumer.invoke`): an ``async def`` handler is run to
        completion on this harness's event loop (one for its lifetime, like the consumer's), an
        :class:`~postbox.consumer.App` dispatches to the route's handler, and a handler returning
        anything but None raises :class:`~postbox.consumer.invoke.HandlerResultError`."""
        app, delivered = self._prepare(handler, event, None)
        return _run(app, delivered, self._runner())

    def _runner(self) -> asyncio.Runner:
        if self._loop is None:
            self._loop = asyncio.Runner()
        return self._loop

    def _prepare(self, handler: Handler, event: Event, routing_key: RoutingKey | None) -> tuple[App, Event]:
        """The app that routes ``event`` (a plain handler gets a one-route app) and the event as delivered."""
        if isinstance(handler, App):
            app = handler
        else:
            key = (id(handler), event.aggregate_type, event.event_type, id(routing_key))
            app = self._apps.get(key) or self._apps.setdefault(key, _one_route_app(handler, event, routing_key))
        gate = self._gates.get(id(app)) or self._gates.setdefault(id(app), SchemaGate.find(self._schemas, app))
        return app, _delivered(gate, app, event)

    def ref_of(self, handler: Handler, event: Event, routing_key: RoutingKey | None = None) -> EventRef:
        """The event's identity as the runtime makes it: an :class:`~postbox.consumer.App` routes by
        its registration's routing key; a plain handler by ``routing_key`` (default: the aggregate)."""
        app, delivered = self._prepare(handler, event, routing_key)
        return app.event_ref(delivered)

    def deliver(
        self, handler: Handler, event: Event, *, check: bool = True, routing_key: RoutingKey | None = None
    ) -> ApplyResult:
        """Run ``handler(event, fx)`` and apply ``fx`` once for the event.

        Returns the :class:`ApplyResult` (``applied``/``duplicate``/``failed``). With ``check``
        (default) a failed apply raises :class:`~postbox.effects.PermanentEffectError` naming the
        command and the Redis error. A handler exception propagates unchanged. ``routing_key``:
        the one the handler is registered with (an ``App`` knows its own).
        """
        app, delivered = self._prepare(handler, event, routing_key)
        fx = _run(app, delivered, self._runner())
        ref = app.event_ref(delivered)
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
            app, delivered = self._prepare(handler, event, routing_key)
            fx = _run(app, delivered, self._runner())
            ref = app.event_ref(delivered)
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
        """Delete every key the delivered effects touched, and this group's markers (on whatever
        Redis the harness runs against: calling it is asking for it)."""
        keys = sorted(self.touched)
        for start in range(0, len(keys), 500):
            self.redis.delete(*keys[start : start + 500])
        self.touched.clear()

    def close(self) -> None:
        """End the harness: its event loop, its connection, its own server (stopped, folder
        removed); the touched keys are deleted first only as ``cleanup`` says."""
        if self._cleanup_on_close and self._server is None:
            self.cleanup()
        self.touched.clear()
        if self._loop is not None:
            self._loop.close()
            self._loop = None
        if self._own_client:
            self.redis.close()
        if self._server is not None:
            self._server.stop()
            self._server = None

    def __enter__(self) -> "EffectsHarness":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def effects_of(handler: Handler, event: Event, *, schemas_dir: SchemasSetting = None) -> Effects:
    """The effects ``handler`` describes for ``event``, without Redis or Kafka: for unit tests of
    what a handler decides. The event is held to its schema first, as :class:`EffectsHarness` does
    (``schemas_dir`` as there); ``async def`` handlers run to completion on a fresh event loop."""
    app = handler if isinstance(handler, App) else _one_route_app(handler, event, None)
    return _run(app, _delivered(SchemaGate.find(schemas_dir, app), app, event), None)


def _one_route_app(handler: Handler, event: Event, routing_key: RoutingKey | None) -> App:
    """A plain handler registered for the event's own (aggregate, event type), so that it is run,
    typed and checked exactly as in an app."""
    app = App(require_schemas=False)
    app.add(event.aggregate_type, event.event_type, handler, routing_key=routing_key)
    return app


def _delivered(gate: SchemaGate, app: App, event: Event) -> Event:
    gate.check_app(app)
    return gate.delivered(event, app.reader_versions.get((event.aggregate_type, event.event_type)))


def _run(app: App, event: Event, runner: asyncio.Runner | None) -> Effects:
    route = app.route(event.aggregate_type, event.event_type)
    return invoke.run(route.handler, event, name=route.name, runner=runner)
