"""The outbox writer: emit events inside the application's own database transaction.

Typical use, in a transaction the application already holds::

    from postbox import outbox

    with conn.transaction():
        conn.execute("INSERT INTO orders ...", (...))
        outbox.emit(conn, "order", order_id, "OrderPlaced", {...})

or, when the code has no transaction of its own::

    with outbox.transaction() as tx:          # connection from POSTBOX_DATABASE_URL
        tx.execute("INSERT INTO orders ...", (...))
        tx.emit("order", order_id, "OrderPlaced", {...})

``conn`` may also be what the service holds its transaction on: a SQLAlchemy ``Session`` or
``Connection`` (``postgresql+psycopg``), Django's ``connection`` inside ``transaction.atomic()``
(:mod:`postbox.outbox.connection_lookup`; ``AsyncOutbox`` takes an ``AsyncSession``).

The module-level functions use one shared :class:`Outbox` (the project's schemas, the retention
policy from ``POSTBOX_OUTBOX_RETENTION``); build your own Outbox/AsyncOutbox to choose otherwise.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Unpack

import psycopg

from postbox.outbox.aio import AsyncOutbox, AsyncOutboxTransaction
from postbox.outbox.connection_lookup import ServiceConnection
from postbox.outbox.policy import Retention
from postbox.payloads.instance import EventPayload
from postbox.outbox.records import AggregateId, EmitOptions, EmittedEvent, NewEvent
from postbox.outbox.trace import current_traceparent, trace_context, validate_traceparent
from postbox.outbox.uuid7 import uuid7, uuid7_datetime
from postbox.outbox.writer import Outbox, OutboxTransaction

__all__ = [
    "AsyncOutbox",
    "AsyncOutboxTransaction",
    "EmitOptions",
    "EmittedEvent",
    "NewEvent",
    "Outbox",
    "OutboxTransaction",
    "Retention",
    "ServiceConnection",
    "current_traceparent",
    "default_outbox",
    "emit",
    "emit_many",
    "trace_context",
    "transaction",
    "uuid7",
    "uuid7_datetime",
    "validate_traceparent",
]

_default: Outbox | None = None
_local = threading.local()
_lock = threading.Lock()


def default_outbox() -> Outbox:
    """The shared Outbox behind the module-level functions."""
    global _default
    with _lock:
        if _default is None:
            _default = Outbox()
        return _default


def emit(conn: ServiceConnection, aggregate_type: str, aggregate_id: AggregateId, event_type: str,
         payload: EventPayload, **options: Unpack[EmitOptions]) -> EmittedEvent:
    """Emit one event in ``conn``'s transaction (see :meth:`Outbox.emit`): a psycopg ``Connection``,
    a SQLAlchemy ``Session``/``Connection`` or Django's connection."""
    return default_outbox().emit(conn, aggregate_type, aggregate_id, event_type, payload, **options)


def emit_many(conn: ServiceConnection, events: Iterable[NewEvent]) -> list[EmittedEvent]:
    """Emit many events in ``conn``'s transaction (see :meth:`Outbox.emit_many`)."""
    return default_outbox().emit_many(conn, events)


@contextmanager
def transaction(conn: psycopg.Connection[Any] | None = None, *, pipeline: bool = True) -> Iterator[OutboxTransaction]:
    """A unit of work; without ``conn``, on a per-thread connection to POSTBOX_DATABASE_URL."""
    if conn is None:
        own = getattr(_local, "outbox", None)
        if own is None:
            own = _local.outbox = default_outbox().with_own_connection()
        with own.transaction(pipeline=pipeline) as tx:
            yield tx
    else:
        with default_outbox().transaction(conn, pipeline=pipeline) as tx:
            yield tx


def __getattr__(name: str) -> Any:
    """``postbox.outbox.Event`` was renamed :class:`NewEvent` (so ``Event`` names only the delivered
    event a handler receives); the old name keeps working for a release, with a warning, so a
    service upgrading postbox does not break on an import."""
    if name == "Event":
        import warnings

        warnings.warn(
            "postbox.outbox.Event is now postbox.outbox.NewEvent; the old name goes away in a later release",
            DeprecationWarning,
            stacklevel=2,
        )
        return NewEvent
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
