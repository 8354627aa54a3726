"""The application object: which handler runs for which event.

::

    from postbox.consumer import App
    from postbox.effects import aggregate_keys

    app = App("billing")                                   # the default consumer group

    @app.handler("order", "OrderPlaced")
    def on_placed(event, fx):
        k = aggregate_keys("order", event.aggregate_id)
        fx.hset(k("state"), {"status": "placed"})

    @app.handler("payment")                                # every event type of "payment"
    async def on_payment(event, fx): ...

    @app.handler("*", "Audit")                             # this event type on any aggregate
    def on_audit(event, fx): ...

    @app.catch_all
    def everything_else(event, fx): ...

Routing: each event's dedupe marker (and, on Redis Cluster, the slot every key of its effects must
be in) comes from the event's aggregate, the tag ``aggregate_keys(event.aggregate_type,
event.aggregate_id)`` gives its keys. A handler that writes keys of another slot declares it::

    @app.handler("payment", "PaymentCaptured", routing_key=lambda e: aggregate_keys("order", e.payload["order_id"])())

A handler may ask for its payload as a dataclass or TypedDict instead of a mapping (the classes
``postbox schemas codegen`` writes from ``schemas/``)::

    @app.handler("payment", "PaymentCaptured")
    def on_captured(event: Event[PaymentCaptured], fx: Effects) -> None:
        fx.hincrby(k("totals"), "captured_cents", event.payload.amount_cents)

The class is checked against the event's reader schema when the app starts (see
:mod:`postbox.payloads`); ``routing_key`` still receives the event with its mapping payload.

Changing a handler's routing key moves its markers, like renaming the group: events the group
applied before the change would apply again if redelivered (see docs/effects.md).

A handler is ``handler(event: Event, fx: Effects) -> None``, sync or ``async``; parameters after
``fx`` receive resources by name — what the app's start-up hooks made (``@app.on_startup``, see
:mod:`postbox.consumer.lifecycle`), e.g. ``def charge(event, fx, db: ConnectionPool)``. It only *describes*
what the event changes (on ``fx``); the runtime applies the descriptions of a whole batch through
the effects engine, exactly once per group. Lookup order: exact (aggregate, event type), then the
aggregate's wildcard, then the event type on any aggregate, then the catch-all. No match →
:class:`~postbox.errors.NoHandlerError` (dead-lettered as ``UnknownEventType``).

The app is itself a handler (``app(event, fx)`` dispatches and runs async handlers to completion),
so ``EffectsHarness().deliver(app, event)`` tests the whole routing table without Kafka.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, Union

from postbox.consumer import invoke
from postbox.consumer.lifecycle import HANDLER_PARAMS, Lifecycle, resource_params
from postbox.effects import Effects, EventRef, RoutingKey, event_ref
from postbox.errors import HandlerRegistrationError, NoHandlerError
from postbox.events import Event
from postbox.payloads.handler import typed, wants_typed_payload
from postbox.topics import topic_for

Handler = Callable[[Event, Effects], Union[None, Awaitable[None]]]
H = TypeVar("H", bound=Callable[..., Any])

ANY = "*"
_NAME = re.compile(r"[A-Za-z0-9._\-]+\Z")


@dataclass(frozen=True)
class Route:
    """One registration: ``aggregate_type``/``event_type`` may be ``"*"``; ``routing_key`` (None:
    the event's aggregate) gives a key of the slot the handler's effects write."""

    aggregate_type: str
    event_type: str
    handler: Handler
    is_async: bool
    routing_key: RoutingKey | None = None
    #: Exception classes this handler declares transient (retried with backoff, never
    #: dead-lettered), on top of the built-in table of :mod:`postbox.consumer.handler_errors`.
    transient: tuple[type[BaseException], ...] = ()
    #: The resources (start-up hook names) the handler takes after ``event, fx``; ``handler``
    #: is then a wrapper that passes them, so every caller calls ``handler(event, fx)``.
    resources: tuple[str, ...] = ()

    def event_ref(self, event: Event) -> EventRef:
        """The event's identity for the effects engine (id + routing tag) under this route."""
        return event_ref(event, self.routing_key)

    @functools.cached_property
    def name(self) -> str:
        """The handler's name in errors and logs (looked up once: asked for every event)."""
        return getattr(self.handler, "__qualname__", repr(self.handler))


class App:
    """A registry of handlers plus the app's defaults (group, topics, schemas folder).

    ``name``: the default consumer group (``POSTBOX_GROUP``/``--group`` override it).
    ``topics``: topics to read when ``POSTBOX_TOPICS`` is not set; by default
    ``outbox.event.<aggregate_type>`` for every aggregate type a handler names.
    ``schemas_dir``: the event schemas folder for decoding (default: ``POSTBOX_SCHEMAS_DIR``, else
    ``./schemas``). ``require_schemas``: refuse to start when a handler names an (aggregate type,
    event type) that folder has no schema for (turn off for apps that only read JSON outboxes).
    ``reader_versions``: ``{(aggregate_type, event_type): version}`` to read an event into a pinned
    schema version instead of the latest.
    """

    def __init__(
        self,
        name: str | None = None,
        *,
        topics: Iterable[str] | None = None,
        schemas_dir: Path | str | None = None,
        require_schemas: bool = True,
        reader_versions: dict[tuple[str, str], int] | None = None,
    ) -> None:
        self.name = name
        self._topics = tuple(topics) if topics is not None else None
        self.schemas_dir = Path(schemas_dir) if schemas_dir is not None else None
        self.require_schemas = require_schemas
        self.reader_versions = dict(reader_versions or {})
        self._routes: dict[tuple[str, str], Route] = {}
        self._catch_all: Route | None = None
        self.lifecycle = Lifecycle()

    # -- registration ---------------------------------------------------------------------------

    def handler(
        self, aggregate_type: str = ANY, event_type: str | Iterable[str] = ANY, *, routing_key: RoutingKey | None = None,
        transient: Iterable[type[BaseException]] = (),
    ) -> Callable[[H], H]:
        """Decorator: register a handler for ``aggregate_type`` and one or several event types.

        ``"*"`` matches anything; ``app.handler()`` alone is the catch-all. Registering the same
        pair twice raises :class:`HandlerRegistrationError` (a silent override hides bugs).
        ``routing_key(event)``: a key of the slot the handler writes, when that is not the
        event's aggregate (see the module docs). ``transient``: exception classes of the
        handler's dependencies that mean "retry later" (see
        :mod:`postbox.consumer.handler_errors`; raising :class:`postbox.consumer.Retry` says the
        same without declaring anything).
        """
        types = [event_type] if isinstance(event_type, str) else list(event_type)
        if not types:
            raise HandlerRegistrationError("app.handler(...) needs at least one event type (or '*')")

        def register(func: H) -> H:
            for et in types:
                self.add(aggregate_type, et, func, routing_key=routing_key, transient=transient)
            return func

        return register

    def catch_all(self, func: H) -> H:
        """Decorator: the handler for events no other registration matches."""
        self.add(ANY, ANY, func)
        return func

    def add(self, aggregate_type: str, event_type: str, func: Handler, *, routing_key: RoutingKey | None = None,
            transient: Iterable[type[BaseException]] = ()) -> None:
        """Register ``func`` (the non-decorator form of :meth:`handler`)."""
        for label, value in (("aggregate type", aggregate_type), ("event type", event_type)):
            if not isinstance(value, str) or not value or (value != ANY and not _NAME.match(value)):
                raise HandlerRegistrationError(
                    f"{label} {value!r} for handler {_name(func)}: expected a name of letters, digits, '.', '_', '-' or '*'"
                )
        needs = resource_params(func, skip=HANDLER_PARAMS, what="handler")
        _check_signature(func, needs)
        if needs:
            func = self._bind_resources(func, needs)  # callable as handler(event, fx) from here on
        if wants_typed_payload(func):
            func = typed(func)  # builds Event[P]'s payload before each call (postbox.payloads)
        if routing_key is not None and not callable(routing_key):
            raise HandlerRegistrationError(f"routing_key of handler {_name(func)} must be callable as routing_key(event)")
        declared = tuple(transient)
        if not all(isinstance(cls, type) and issubclass(cls, BaseException) for cls in declared):
            raise HandlerRegistrationError(f"transient= of handler {_name(func)} must list exception classes, got {declared!r}")
        route = Route(aggregate_type, event_type, func, _is_async(func), routing_key, declared, needs)
        if aggregate_type == ANY and event_type == ANY:
            if self._catch_all is not None:
                raise HandlerRegistrationError(
                    f"a catch-all is already registered ({self._catch_all.name}); cannot add {_name(func)}"
                )
            self._catch_all = route
            return
        existing = self._routes.get((aggregate_type, event_type))
        if existing is not None:
            raise HandlerRegistrationError(
                f"{aggregate_type}/{event_type} already has handler {existing.name}; cannot add {_name(func)}",
                fix="register one handler per (aggregate type, event type) and call helpers from it",
            )
        self._routes[(aggregate_type, event_type)] = route

    def _bind_resources(self, func: Handler, needs: tuple[str, ...]) -> Handler:
        """``func`` callable as ``handler(event, fx)``: its resources are looked up at each call
        (they exist only between the app's start-up and shutdown)."""
        lifecycle, who = self.lifecycle, f"handler {_name(func)}"

        def kwargs() -> dict[str, Any]:
            return {n: lifecycle.resource(n, who) for n in needs}

        if _is_async(func):
            @functools.wraps(func)
            async def bound_async(event: Event, fx: Effects) -> Any:
                return await func(event, fx, **kwargs())  # type: ignore[misc]

            return bound_async

        @functools.wraps(func)
        def bound(event: Event, fx: Effects) -> Any:
            return func(event, fx, **kwargs())

        return bound

    # -- lifecycle -------------------------------------------------------------------------------

    def on_startup(self, func: H) -> H:
        """Decorator: run ``func`` once when the app starts; its return value is the resource
        named after it, passed to handlers and hooks with a parameter of that name."""
        self.lifecycle.add_startup(func)
        return func

    def on_shutdown(self, func: H) -> H:
        """Decorator: run ``func`` once when the app stops (SIGTERM, a clean stop, a failed
        start-up), if every resource it takes by parameter name was made."""
        self.lifecycle.add_shutdown(func)
        return func

    def start(self) -> None:
        """Check every resource parameter names a start-up hook, then run the start-up hooks
        (:class:`~postbox.errors.ConfigError` naming the hook when one fails)."""
        self.lifecycle.check({f"handler {r.name}": r.resources for r in self.routes if r.resources})
        self.lifecycle.start()

    def stop(self) -> None:
        """Run the shutdown hooks (reverse order) of the resources that were made."""
        self.lifecycle.stop()

    @contextmanager
    def started(self) -> Iterator[Mapping[str, Any]]:
        """``with app.started() as resources:`` — start-up hooks on entry, shutdown hooks on exit;
        for tests and scripts (``postbox consume`` does this itself)."""
        self.start()
        try:
            yield self.lifecycle.resources
        finally:
            self.stop()

    @property
    def resources(self) -> Mapping[str, Any]:
        """The resources the start-up hooks made (empty before start and after stop)."""
        return self.lifecycle.resources

    # -- lookup ------------------------------------------------------------------------------------

    def route(self, aggregate_type: str, event_type: str) -> Route:
        """The registration that handles this pair; :class:`NoHandlerError` when none does."""
        routes = self._routes
        found = (
            routes.get((aggregate_type, event_type))
            or routes.get((aggregate_type, ANY))
            or routes.get((ANY, event_type))
            or self._catch_all
        )
        if found is None:
            known = ", ".join(f"{a}/{e}" for a, e in sorted(routes)) or "none"
            raise NoHandlerError(
                f"no handler for {aggregate_type}/{event_type} and no catch-all (handlers: {known})",
                aggregate_type=aggregate_type,
                event_type=event_type,
                fix="register one with @app.handler(aggregate_type, event_type) or add @app.catch_all",
            )
        return found

    @property
    def routes(self) -> list[Route]:
        """Every registration, the catch-all last."""
        out = [self._routes[k] for k in sorted(self._routes)]
        return out + ([self._catch_all] if self._catch_all else [])

    @property
    def aggregate_types(self) -> list[str]:
        """The aggregate types named by handlers (wildcards excluded), sorted."""
        return sorted({a for a, _ in self._routes if a != ANY})

    def schema_requirements(self) -> list[tuple[str, str]]:
        """The (aggregate type, event type) pairs handlers name exactly: each needs a schema."""
        return sorted((a, e) for a, e in self._routes if a != ANY and e != ANY)

    def topics(self) -> list[str]:
        """The app's own topic list, or ``outbox.event.<aggregate>`` per named aggregate type."""
        if self._topics is not None:
            return list(self._topics)
        return [topic_for(a) for a in self.aggregate_types]

    # -- calling -----------------------------------------------------------------------------------

    def __call__(self, event: Event, fx: Effects) -> None:
        """Dispatch one event and run its handler to completion into ``fx`` (an async handler on a
        fresh event loop), through the runtime's own path (:mod:`postbox.consumer.invoke`): a
        handler returning anything but None raises :class:`~postbox.consumer.invoke.HandlerResultError`.

        For tests and scripts; the runtime dispatches a batch itself and runs the async handlers of
        one batch concurrently on the one event loop it owns.
        """
        route = self.route(event.aggregate_type, event.event_type)
        invoke.run(route.handler, event, fx, name=route.name)

    def event_ref(self, event: Event) -> EventRef:
        """The event's identity for the effects engine under the route that handles it."""
        return self.route(event.aggregate_type, event.event_type).event_ref(event)

    def __repr__(self) -> str:
        return f"App({self.name!r}, {len(self._routes)} handler(s){', catch-all' if self._catch_all else ''})"


def _name(func: Any) -> str:
    return getattr(func, "__qualname__", None) or repr(func)


def _is_async(func: Any) -> bool:
    target = func if inspect.isfunction(func) or inspect.ismethod(func) else func.__call__
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(target)


def _check_signature(func: Any, resources: tuple[str, ...] = ()) -> None:
    if not callable(func):
        raise HandlerRegistrationError(f"handler {func!r} is not callable")
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return  # builtins and some C callables: trust them
    try:
        sig.bind(object(), object(), **{n: object() for n in resources})
    except TypeError:
        raise HandlerRegistrationError(
            f"handler {_name(func)}{sig} cannot be called as handler(event, fx) (parameters after fx: resources by name)",
            fix="define it as `def handler(event: Event, fx: Effects) -> None` (or async def); "
            "parameters after fx name resources of @app.on_startup hooks",
        ) from None
