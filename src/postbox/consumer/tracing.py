"""One OpenTelemetry span per handled event, a child of the ``traceparent`` the writer captured.

Optional: with the ``otel`` extra installed (``pip install 'postbox-cdc[otel]'``) and a tracer
provider configured by the application (the OpenTelemetry SDK, an exporter), each handler call
runs inside a CONSUMER span named ``<aggregate_type>.<event_type> process`` whose parent is the
span that emitted the event — so one trace runs from the request that wrote the outbox row to the
handler that applied it; the batch's Redis apply is recorded as one ``... apply`` span per event
beside it (:func:`record_applies`). Without OpenTelemetry nothing changes and nothing is imported; with the
API but no SDK the spans are OpenTelemetry's no-ops.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from postbox.events import Event

TRACER_NAME = "postbox.consumer"
#: OpenTelemetry's variable naming a tracer provider to load (then the API is imported to ask it).
PROVIDER_ENV = "OTEL_PYTHON_TRACER_PROVIDER"

#: ``opentelemetry.trace`` and the W3C propagator, once loaded (:func:`_api`).
_trace: Any = None
_PROPAGATOR: Any = None
_NO_OP_PROVIDERS: tuple[type, ...] = ()


#: Whether a tracer provider was configured: once set it stays (OpenTelemetry sets the global
#: provider once per process); until then it is looked up again at most every RECHECK_S, because
#: the lookup (it reads the environment) costs more than the rest of an event's scope.
RECHECK_S = 1.0
_state = {"configured": False, "checked_at": float("-inf")}


def _api() -> Any:
    """``opentelemetry.trace``, or None. Imported only when the application imported it itself (a
    tracer provider is set through it) or names a provider in :data:`PROVIDER_ENV`: postbox never
    makes a consumer that does not trace pay for importing OpenTelemetry at start-up."""
    global _trace, _PROPAGATOR, _NO_OP_PROVIDERS
    if _trace is not None:
        return _trace
    if "opentelemetry.trace" not in sys.modules and not os.environ.get(PROVIDER_ENV):
        return None
    try:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError:  # the optional extra is not installed
        return None
    _PROPAGATOR = TraceContextTextMapPropagator()
    _NO_OP_PROVIDERS = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
    _trace = trace
    return trace


def enabled() -> bool:
    """True when OpenTelemetry is importable and the application configured a tracer provider:
    with only the API (no provider set) every span would be a no-op, and starting one per event
    costs tens of microseconds, so none is started."""
    if _state["configured"]:
        return True
    now = time.monotonic()
    if now - _state["checked_at"] < RECHECK_S:
        return False
    _state["checked_at"] = now
    trace = _api()
    _state["configured"] = trace is not None and not isinstance(trace.get_tracer_provider(), _NO_OP_PROVIDERS)
    return bool(_state["configured"])


def refresh() -> None:
    """Look the provider up again at the next event (a consumer starting: the app's module, which
    configures it, is imported by then)."""
    _state["checked_at"] = float("-inf")


@contextmanager
def event_span(event: Event, group: str | None) -> Iterator[None]:
    """Run the block inside the event's span (a no-op without OpenTelemetry or its provider)."""
    if not enabled():
        yield
        return
    traceparent = event.headers.get("traceparent")
    parent = _PROPAGATOR.extract({"traceparent": traceparent}) if traceparent else None
    attributes: dict[str, Any] = {
        "messaging.system": "kafka",
        "messaging.operation.type": "process",
        "messaging.destination.name": event.topic or "",
        "messaging.destination.partition.id": str(event.partition) if event.partition is not None else "",
        "messaging.kafka.offset": event.offset if event.offset is not None else -1,
        "messaging.message.id": event.id,
        "messaging.consumer.group.name": group or "",
        "postbox.aggregate_type": event.aggregate_type,
        "postbox.event_type": event.event_type,
    }
    tracer = _trace.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(f"{event.aggregate_type}.{event.event_type} process", context=parent,
                                      kind=_trace.SpanKind.CONSUMER, attributes=attributes):  # fmt: skip
        yield


def record_applies(applied: Sequence[tuple[Event, str]], group: str | None, start_ns: int, end_ns: int) -> None:
    """One span ``<aggregate_type>.<event_type> apply`` per event of one ``engine.apply`` (the
    batch's Redis round trips, from ``start_ns`` to ``end_ns``), under the span that emitted the
    event like its ``process`` span: the trace reaches the Redis apply. ``applied``: (event,
    ``applied``/``duplicate``/``failed``). A no-op while tracing is off."""
    if not enabled() or not applied:
        return
    tracer = _trace.get_tracer(TRACER_NAME)
    for event, result in applied:
        traceparent = event.headers.get("traceparent")
        parent = _PROPAGATOR.extract({"traceparent": traceparent}) if traceparent else None
        span = tracer.start_span(f"{event.aggregate_type}.{event.event_type} apply", context=parent, start_time=start_ns,
                                 attributes={"messaging.message.id": event.id, "messaging.consumer.group.name": group or "",
                                             "postbox.apply.result": result})  # fmt: skip
        span.end(end_time=end_ns)
