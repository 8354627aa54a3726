"""Structured logs: every runtime log line carries fields (group, topic, partition, offset, ...).

``configure("json")`` prints one JSON object per line on stderr (``ts``, ``level``, ``logger``,
``msg`` and the fields); ``configure("text")`` prints ``msg key=value ...``. Call sites use
:func:`log_event` so both formats get the same fields.

The log context: :func:`log_context` binds fields to the current context (a ``contextvars``
variable, so each thread and each asyncio task has its own), and every line written inside it —
by postbox's loggers *and by any other logger*, a handler's ``logging.getLogger(__name__)``
included — carries them. The runtime binds the group for its whole run and, around each handler
call, the event's fields (:func:`event_fields`: topic, partition, offset, event id, event type,
trace id). :func:`configure` sends every logger of the process (the root logger) to stderr in the
chosen format, so a handler's own lines are neither dropped nor printed in another format; the
handlers an app installed itself keep receiving every line, with the fields as record attributes.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar, Token
from datetime import datetime, timezone
from typing import Any

from postbox.events import Event
from postbox.safe_text import safe_text

_FIELDS = "postbox_fields"
_CONTEXT = "postbox_context"

_context: ContextVar[Mapping[str, Any] | None] = ContextVar("postbox_log_context", default=None)
#: The event being handled here: its fields are computed only when a line is written (a handler
#: that logs nothing costs one ContextVar set/reset per event, not a dict of seven fields).
_event: ContextVar[Event | None] = ContextVar("postbox_log_event", default=None)


@contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Add ``fields`` (None values left out) to every log line written inside the block."""
    token = _context.set({**(_context.get() or {}), **{k: v for k, v in fields.items() if v is not None}})
    try:
        yield
    finally:
        _context.reset(token)


class event_context:  # noqa: N801 - used like a function: ``with event_context(event):``
    """Every log line written inside the block carries ``event``'s fields (:func:`event_fields`).

    A class, not a generator context manager: entered once per handled event, it stays cheap."""

    __slots__ = ("_event", "_token")

    def __init__(self, event: Event) -> None:
        self._event = event

    def __enter__(self) -> None:
        self._token = _event.set(self._event)

    def __exit__(self, *_exc: object) -> None:
        _event.reset(self._token)


#: ``bind_event(event)`` binds ``event`` here until ``unbind_event(token)`` with the token it
#: returned (what :class:`event_context` does, without an object per event: the runtime's
#: per-event form). The ContextVar's own methods, not functions around them: a Python call each
#: way per handled event cost ~1k instructions (cachegrind, the consumer's handler call).
bind_event: Callable[[Event], Token[Event | None]] = _event.set
unbind_event: Callable[[Token[Event | None]], None] = _event.reset


def current_context() -> Mapping[str, Any]:
    """The fields bound here now: :func:`log_context`'s, then the event's (for the log filter,
    tests, and code that hands work to another thread)."""
    fields = _context.get()
    event = _event.get()
    if event is None:
        return fields or {}
    return {**(fields or {}), **{k: v for k, v in event_fields(event).items() if v is not None}}


def event_fields(event: Event) -> dict[str, Any]:
    """The fields that say which event a line belongs to; ``trace_id`` is the W3C trace id of
    the ``traceparent`` the writer captured (None without one)."""
    return {"topic": event.topic, "partition": event.partition, "offset": event.offset, "event_id": event.id,
            "event_type": event.event_type, "aggregate_type": event.aggregate_type,
            "trace_id": trace_id_of(event.headers.get("traceparent"))}  # fmt: skip


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id (second field) of a ``version-traceid-parentid-flags`` header, else None."""
    if not traceparent:
        return None
    parts = traceparent.split("-")
    return parts[1] if len(parts) >= 4 and len(parts[1]) == 32 else None


class ContextFilter(logging.Filter):
    """Copies the log context onto each record when it is written (in the writing thread/task):
    whole, for postbox's formatters, and field by field as record attributes (``event_id``,
    ``group``...) where the record has no attribute of that name, so an app's own formatter
    (``%(event_id)s``, a JSON formatter that prints extras) sees them too."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, _CONTEXT):
            context = current_context()
            setattr(record, _CONTEXT, context)
            for name, value in context.items():
                if not hasattr(record, name):
                    setattr(record, name, value)
        return True


def _fields_of(record: logging.LogRecord) -> dict[str, Any]:
    """Context fields first, the call site's own fields over them."""
    return {**(getattr(record, _CONTEXT, None) or {}), **(getattr(record, _FIELDS, None) or {})}


def log_event(logger: logging.Logger, level: int, msg: str, **fields: Any) -> None:
    if logger.isEnabledFor(level):
        logger.log(level, msg, extra={_FIELDS: fields})


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        data.update(_fields_of(record))
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return safe_text(json.dumps(data, default=str, ensure_ascii=False))  # a lone surrogate: its JSON escape


def json_line(logger_name: str, level: int, msg: str, exc: BaseException | None = None, **fields: Any) -> str:
    """One line as :class:`JsonFormatter` writes it, for a line written outside logging (the fatal
    error of a command whose logs are JSON: :mod:`postbox.cli.fatal_lines`)."""
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    record = logging.LogRecord(logger_name, level, "", 0, msg, None, exc_info)
    setattr(record, _FIELDS, fields)
    return JsonFormatter().format(record)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = _fields_of(record)
        if fields:
            line += " " + " ".join(f"{k}={_short(v)}" for k, v in fields.items())
        return safe_text(line)


def _short(value: Any) -> str:
    text = str(value)
    if " " in text or not text:
        text = json.dumps(text, ensure_ascii=False)
    return text if len(text) <= 300 else text[:297] + "..."


#: ``log_stderr`` values: ``auto`` adds postbox's stderr handler only when the app configured no
#: handler on the root logger; ``always`` adds it beside the app's; ``never`` leaves logging to the app.
LOG_STDERR = ("auto", "always", "never")


class _PostboxStderr(logging.StreamHandler):  # type: ignore[type-arg]
    """postbox's own stderr handler: told apart from the app's, so a second :func:`configure`
    (a window run after a check, a test) replaces it instead of adding another."""


def configure(log_format: str = "text", level: str = "INFO", stderr: str = "auto") -> None:
    """Route every logger of the process (the root logger) so postbox's lines and a handler's own
    carry the log context, without taking logging away from the app.

    The handlers the app installed on the root logger stay and get the context fields (as record
    attributes, see :class:`ContextFilter`); postbox's stderr handler in ``log_format`` is added
    per ``stderr`` (:data:`LOG_STDERR`). ``level`` is the root logger's level (``--log-level``
    means it, whoever installed the handlers)."""
    if stderr not in LOG_STDERR:
        raise ValueError(f"log_stderr must be one of {', '.join(LOG_STDERR)}, not {stderr!r}")
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _PostboxStderr)]:
        root.removeHandler(old)
    app_handlers = list(root.handlers)
    for handler in app_handlers:
        if not any(isinstance(f, ContextFilter) for f in handler.filters):
            handler.addFilter(ContextFilter())
    if stderr == "always" or (stderr == "auto" and not app_handlers):
        ours = _PostboxStderr(sys.stderr)
        ours.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
        ours.addFilter(ContextFilter())
        root.addHandler(ours)
    root.setLevel(level)
    library = logging.getLogger("postbox")
    library.setLevel(logging.NOTSET)
    library.propagate = True
