"""The start-up check: every typed handler against the reader schema of each event it handles.

A payload class that cannot read its schema (a field it requires that the schema lacks, a wrong
type, an optional field annotated as always present) would fail on every record of that event,
one dead letter at a time. It is a mistake in the deployment, so the consumer refuses to start
(:class:`ConfigError`, exit code 1) naming the handler, the field and the schema file, before it
reads a record. ``postbox.testing`` runs the same check, so a test fails the way production would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from postbox.errors import ConfigError, HandlerRegistrationError
from postbox.payloads.fit import misfits
from postbox.payloads.handler import TypedHandler
from postbox.schemas.repository import EventSchema


class RouteLike(Protocol):
    """What the check reads of a registration (:class:`postbox.consumer.Route`)."""

    @property
    def aggregate_type(self) -> str: ...

    @property
    def event_type(self) -> str: ...

    @property
    def handler(self) -> Any: ...

    @property
    def name(self) -> str: ...


def check_routes(routes: Iterable[RouteLike], schema_for: Callable[[str, str], EventSchema | None], wildcard: str) -> None:
    """Raise ConfigError listing every typed handler whose payload class does not fit its schema.

    ``schema_for(aggregate_type, event_type)``: the reader schema the consumer decodes into, or
    None when there is none (a JSON-only event: its payloads are checked as they are built);
    ``wildcard``: the app's "any" name (:data:`postbox.consumer.app.ANY`)."""
    problems: list[str] = []
    for route in routes:
        problems.extend(route_problems(route, schema_for, wildcard))
    if problems:
        raise ConfigError(
            f"{len(problems)} payload annotation(s) do not fit their event's schema:\n  " + "\n  ".join(problems),
            fix="change the annotation as each line says, or regenerate the payload classes from schemas/ with `postbox schemas codegen`",
        )


def route_problems(route: RouteLike, schema_for: Callable[[str, str], EventSchema | None], wildcard: str) -> list[str]:
    """One line per misfit of one registration (empty for untyped handlers)."""
    handler = route.handler
    if not isinstance(handler, TypedHandler):
        return []
    try:
        cls = handler.payload_class
    except HandlerRegistrationError as exc:
        return [f"{exc.message} ({exc.fix})"]
    if cls is None:
        return []
    where = f"handler {route.name} ({route.aggregate_type}/{route.event_type})"
    if wildcard in (route.aggregate_type, route.event_type):
        return [f"{where} reads Event[{cls.__name__}] but is registered for a wildcard, so no schema can be checked: register it for the event types it reads"]
    schema = schema_for(route.aggregate_type, route.event_type)
    if schema is None:
        return []
    source = schema.path if schema.path is not None else schema.label
    return [f"{where}: field {m.path!r} of {cls.__name__} {m.problem} (schema file {source}, {schema.label})"
            for m in misfits(cls, schema.parsed, schema.names)]
