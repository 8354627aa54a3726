"""What surrounds one handler call: the event's log context and, when OpenTelemetry is installed,
its span. The runtime (and anything else that calls handlers for real events) enters
:func:`event_scope` around each call, so both follow the event into async handlers' tasks too."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from postbox.consumer.logs import event_fields, log_context
from postbox.consumer.tracing import event_span
from postbox.events import Event


@contextmanager
def event_scope(event: Event, group: str | None = None) -> Iterator[None]:
    """Every log line inside carries the event's fields; the block runs in the event's span."""
    with log_context(**event_fields(event)), event_span(event, group):
        yield
