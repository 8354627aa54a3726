"""W3C trace context for outbox rows: the ``traceparent`` of the code that emitted an event.

The writer stores it in the outbox row; the Outbox Event Router copies it into a Kafka header, so
a consumer can continue the producer's trace. The value comes from, in order: the explicit
``traceparent=`` argument of emit, the context variable set with :func:`trace_context` (for
frameworks that already parsed an incoming ``traceparent`` header), or the current OpenTelemetry
span when OpenTelemetry happens to be installed (it is not a dependency).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from postbox.errors import TraceContextError
from postbox.outbox.deliverable import MAX_TRACEPARENT_BYTES

_PATTERN = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[0-9a-zA-Z_.-]*)?$")

current_traceparent: ContextVar[str | None] = ContextVar("postbox_traceparent", default=None)


def validate_traceparent(value: str) -> str:
    """Return ``value`` if it is a valid W3C traceparent the connector can carry as a header, else
    raise TraceContextError saying why (a longer one would be refused by the database's domain,
    aborting the caller's transaction)."""
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_TRACEPARENT_BYTES:
        raise TraceContextError(
            f"traceparent is {size:,} bytes, over the header limit (at most {MAX_TRACEPARENT_BYTES} bytes): "
            f"{value[:60]!r}...",
            fix="pass the caller's traceparent as it came (version-traceid-parentid-flags, 55 bytes for version 00)",
        )
    match = _PATTERN.match(value)
    if not match:
        raise TraceContextError(
            f"traceparent {value!r} is not version-traceid-parentid-flags in lowercase hex",
            fix="e.g. 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        )
    version, trace_id, parent_id, _flags, rest = match.groups()
    if version == "ff":
        raise TraceContextError(f"traceparent {value!r}: version ff is forbidden")
    if version == "00" and rest:
        raise TraceContextError(f"traceparent {value!r}: version 00 has exactly four fields")
    if trace_id == "0" * 32:
        raise TraceContextError(f"traceparent {value!r}: the trace id is all zeros")
    if parent_id == "0" * 16:
        raise TraceContextError(f"traceparent {value!r}: the parent id is all zeros")
    return value


@contextmanager
def trace_context(traceparent: str | None) -> Iterator[None]:
    """Make ``traceparent`` the one emits in this context (task, thread) record."""
    token = current_traceparent.set(validate_traceparent(traceparent) if traceparent else None)
    try:
        yield
    finally:
        current_traceparent.reset(token)


def resolve_traceparent(explicit: str | None = None) -> str | None:
    """The traceparent an emit records (explicit, else context variable, else OpenTelemetry)."""
    if explicit is not None:
        return validate_traceparent(explicit)
    value = current_traceparent.get()
    if value is not None:
        return value
    return _from_opentelemetry()


_otel_trace: object | None = None
_otel_checked = False


def _from_opentelemetry() -> str | None:
    global _otel_trace, _otel_checked
    if not _otel_checked:  # look once: a failed import on every emit would cost more than the emit
        _otel_checked = True
        try:
            from opentelemetry import trace  # type: ignore[import-not-found, unused-ignore]  # optional: found when installed

            _otel_trace = trace
        except ImportError:
            _otel_trace = None
    if _otel_trace is None:
        return None
    ctx = _otel_trace.get_current_span().get_span_context()  # type: ignore[attr-defined]
    if not ctx.is_valid:
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"
