"""What surrounds one handler call: the event's log context and, when OpenTelemetry is installed,
its span. The runtime (and anything else that calls handlers for real events) enters
:func:`event_scope` around each call, so both follow the event into async handlers' tasks too."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from postbox.consumer import tracing
from postbox.consumer.logs import event_context
from postbox.events import Event


def event_scope(event: Event, group: str | None = None) -> AbstractContextManager[Any]:
    """Every log line inside carries the event's fields; the block runs in the event's span when
    OpenTelemetry is configured. Entered once per event: without tracing it is one ContextVar
    set/reset (the fields are computed only when a line is written)."""
    if not tracing.enabled():
        return event_context(event)
    return _traced(event, group)


@contextmanager
def _traced(event: Event, group: str | None) -> Iterator[None]:
    with event_context(event), tracing.event_span(event, group):
        yield
