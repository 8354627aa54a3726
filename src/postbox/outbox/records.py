"""What an emit takes and gives back: the events handed to the writer and the rows it makes.

Their own module so that everything that turns events into rows (:mod:`postbox.outbox.rows` for
one event, :mod:`postbox.outbox.batch` for a batch) and everything that sends them share one
definition; :mod:`postbox.outbox.rows` re-exports them where callers have always found them.
"""

from __future__ import annotations

import collections
import itertools
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypedDict

from postbox.payloads.instance import EventPayload
from postbox.topics import topic_for


#: What an aggregate id may be given as (it is sent as its string: the Kafka key).
AggregateId = str | int | uuid.UUID


class EmitOptions(TypedDict, total=False):
    """The keyword options of an emit (``emit``, ``execute_and_emit``, sync and async), all optional.

    ``version``: the schema version to encode the payload with (default: the event's latest), for a
    producer that must keep writing an older version while its consumers catch up.
    ``traceparent``: the W3C trace context to record (default: :func:`~postbox.outbox.trace_context`'s,
    else the current OpenTelemetry span's, else none); it travels in the ``traceparent`` header.
    ``event_id``: the event's id (default: a new UUIDv7), for a caller that must know it before the
    emit; it must be unique, and a UUIDv7 to land in the partition of its time.
    """

    version: int | None
    traceparent: str | None
    event_id: uuid.UUID | None


@dataclass(frozen=True)
class NewEvent:
    """One event to emit (for batch emit)."""

    aggregate_type: str
    aggregate_id: str
    event_type: str
    payload: EventPayload
    version: int | None = None
    traceparent: str | None = None


@dataclass(frozen=True, slots=True)
class EmittedEvent:
    """What was written: the event id (the Kafka ``id`` header) and where the event will go.

    Slotted: a batch returns one per event, and an instance without a ``__dict__`` is one object
    less for the garbage collector to follow (it showed in a batch's time)."""

    id: uuid.UUID
    aggregate_type: str
    aggregate_id: str
    event_type: str
    schema_version: int | None
    traceparent: str | None

    @property
    def topic(self) -> str:
        """The Kafka topic the Outbox Event Router routes this event to."""
        return topic_for(self.aggregate_type)


_new = object.__new__
_SET_ID, _SET_AGGREGATE_TYPE, _SET_AGGREGATE_ID, _SET_EVENT_TYPE, _SET_VERSION, _SET_TRACE = (
    EmittedEvent.__dict__[name].__set__
    for name in ("id", "aggregate_type", "aggregate_id", "event_type", "schema_version", "traceparent"))


def emitted_event(event_id: uuid.UUID, aggregate_type: str, aggregate_id: str, event_type: str,
                  schema_version: int | None, traceparent: str | None) -> EmittedEvent:
    """``EmittedEvent(...)`` of values the writer has checked, without the generated ``__init__``
    (six ``object.__setattr__`` calls, which a frozen dataclass's makes, cost more than the rest of
    it): each slot set through its own descriptor. The same instance
    (tests/unit/test_writer_known_types.py)."""
    event = _new(EmittedEvent)
    _SET_ID(event, event_id)
    _SET_AGGREGATE_TYPE(event, aggregate_type)
    _SET_AGGREGATE_ID(event, aggregate_id)
    _SET_EVENT_TYPE(event, event_type)
    _SET_VERSION(event, schema_version)
    _SET_TRACE(event, traceparent)
    return event


def emitted_events(ids: Sequence[uuid.UUID], aggregate_types: Iterable[str], aggregate_ids: Iterable[str],
                   event_types: Iterable[str], schema_versions: Iterable[int | None],
                   traceparents: Iterable[str | None]) -> list[EmittedEvent]:
    """:func:`emitted_event` of each row of these columns (``len(ids)`` rows), made a slot at a
    time for all of them: ``map`` over each slot's descriptor, no Python call per event."""
    events = list(map(_new, itertools.repeat(EmittedEvent, len(ids))))
    for setter, column in ((_SET_ID, ids), (_SET_AGGREGATE_TYPE, aggregate_types), (_SET_AGGREGATE_ID, aggregate_ids),
                           (_SET_EVENT_TYPE, event_types), (_SET_VERSION, schema_versions), (_SET_TRACE, traceparents)):
        collections.deque(map(setter, events, column), 0)
    return events


class PreparedRow(NamedTuple):
    """An event ready to send: what the caller gets back, and the INSERT's parameters (a tuple:
    made on every emit, and cheaper than a frozen dataclass)."""

    event: EmittedEvent
    params: tuple[Any, ...]


__all__ = ["AggregateId", "EmitOptions", "EmittedEvent", "NewEvent", "PreparedRow", "emitted_event", "emitted_events"]
