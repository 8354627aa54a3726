"""Decoding and routing one record: ``record → Routed(event, route, ref) | Failure``, never an exception.

Whatever goes wrong with ONE record — bytes no codec reads, a JSON number of 5,000 digits, an
array nested 200,000 deep, a missing or malformed ``id``, a JSON payload its event's schema
refuses, no handler — is that record's :class:`Failure` (dead-lettered with a specific error
class), never the process's: an exception escaping the batch would crash the consumer into a
restart loop on the same batch. Configuration mistakes (a pinned reader version that does
not exist) are refused at start-up instead (:mod:`postbox.consumer.reader_schemas`).

Error classes: ``DecodeError`` (the bytes or headers), ``SchemaMismatch`` (a JSON payload its
event's schema refuses), ``UnknownEventType`` (no handler, or an Avro event of a type with
no schema here), ``RoutingError`` (an
unexpected error of the app's routing) — each with a message naming the record and what was
wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, NamedTuple

from confluent_kafka import Message

from postbox import failure_classes as classes
from postbox.codec import AvroCodec, DecodedEvent, JsonCodec, is_single_object
from postbox.codec.headers import RouterMeta, router_meta
from postbox.codec.json_conform import conform
from postbox.codec.validate import Invalid
from postbox.consumer.app import App, Route
from postbox.topics import TOPIC_PREFIX
from postbox.consumer.dlq_record import Failure, Origin, one_line
from postbox.errors import DecodeError, NoHandlerError, PostboxError, UnknownEventError, UnknownEventTypeError
from postbox.effects import EventRef
from postbox.events import Event
from postbox.frozen import assemble
from postbox.ids import event_id_problem, is_event_id


class Routed(NamedTuple):
    """A decoded record with its route and its identity for the effects engine."""

    event: Event
    route: Route
    ref: EventRef


#: ``Routed(event, route, ref)`` without the generated ``__new__``, a Python function that does
#: exactly this: the same tuple, one call less per record.
_routed = tuple.__new__

#: Where a record was read: (topic, partition, offset); formatted only for an error message.
At = tuple[str, int, int]


@dataclass(frozen=True)
class Decoder:
    """Turns records into routed events for one app. ``codec``: None when the app has no schemas
    (Avro records then fail as ``DecodeError``; JSON is read unchecked).

    Two entry points, one path: :meth:`message` reads a confluent-kafka message as it comes (the
    runtime's per-record path: no :class:`Origin` is built unless the record fails and is
    dead-lettered), ``decoder(origin)`` reads an :class:`Origin` (tests, tools)."""

    app: App
    codec: AvroCodec | None
    json: JsonCodec = JsonCodec()

    def __call__(self, origin: Origin) -> "Routed | Failure":
        return self.record((origin.topic, origin.partition, origin.offset), origin.key, origin.value, origin.headers)

    def message(self, msg: Message) -> "Routed | Failure":
        """:meth:`record` of a confluent-kafka message (one without an error)."""
        return self.record((msg.topic(), msg.partition(), msg.offset()), msg.key(), msg.value(), msg.headers() or ())  # type: ignore[arg-type]  # set on a record without an error

    def record(self, at: At, key: bytes | None, value: bytes | None, raw_headers: Sequence[tuple[str, object]]) -> "Routed | Failure":
        """The record's routed event, or its :class:`Failure` (never an exception)."""
        try:
            event = self.event(at, key, value, raw_headers)
        except UnknownEventTypeError as exc:  # a type with no schema here: like one no handler takes
            return Failure(classes.UNKNOWN_EVENT_TYPE, f"record {where(at)}: {exc.message}")
        except DecodeError as exc:
            return Failure(classes.DECODE_ERROR, exc.message)
        except _SchemaMismatch as exc:
            return Failure(classes.SCHEMA_MISMATCH, str(exc))
        except Exception as exc:  # noqa: BLE001 - one record's problem, whatever it is
            return Failure(classes.DECODE_ERROR, f"{where(at)}: cannot decode: {type(exc).__name__}: {one_line(str(exc), 500)}")
        try:
            route = self.app.route(event.aggregate_type, event.event_type)
            return _routed(Routed, (event, route, route.event_ref(event)))  # the handler's routing_key runs here
        except NoHandlerError as exc:
            return Failure(classes.UNKNOWN_EVENT_TYPE, exc.message)
        except Exception as exc:  # noqa: BLE001
            return Failure(classes.ROUTING_ERROR, f"{where(at)}: routing {event.aggregate_type}/{event.event_type} raised {type(exc).__name__}: {one_line(str(exc), 500)}")

    def event(self, at: At, key: bytes | None, value: bytes | None, raw_headers: Sequence[tuple[str, object]]) -> Event:
        """The record's event; DecodeError / _SchemaMismatch say what is wrong and where."""
        headers, (event_id, header_type, header_aggregate, created_at) = _headers(raw_headers)
        if not is_event_id(event_id):
            raise _malformed_id(at, event_id)
        aggregate_hint = header_aggregate or aggregate_from_topic(at[0])
        payload, written_type, written_aggregate = self.decode(at, value, header_type, header_aggregate, aggregate_hint)
        event_type = written_type or header_type
        if not event_type:
            raise DecodeError(f"record {where(at)} has no 'event_type' header")
        return assemble(Event, {  # the id is checked above: Event's __post_init__ has nothing left to check
            "id": event_id,
            "aggregate_type": header_aggregate or written_aggregate or aggregate_hint,
            "aggregate_id": key.decode("utf-8", "replace") if key is not None else "",
            "event_type": event_type,
            "payload": payload,
            "headers": headers,
            "topic": at[0],
            "partition": at[1],
            "offset": at[2],
            "created_at": parse_created_at(created_at),
        })

    def decode(self, at: At, value: bytes | None, event_type: str | None, aggregate_type: str | None,
               aggregate_hint: str) -> tuple[Any, str | None, str | None]:
        """The payload, with the event and aggregate type its schema names (None: it names none):
        Avro by fingerprint into the reader version, or JSON held to its schema. ``event_type`` and
        ``aggregate_type``: the record's headers. No DecodedEvent is built on the Avro path (this
        runs once per record)."""
        if value is None:
            raise DecodeError(f"record {where(at)} has no value (a tombstone){' for ' + event_type if event_type else ''}")
        reader_version = self.app.reader_versions.get((aggregate_hint, event_type or "")) if self.app.reader_versions else None
        if is_single_object(value):
            if self.codec is None:
                raise DecodeError("Avro record but this consumer has no schema repository", fix="set --schemas-dir / POSTBOX_SCHEMAS_DIR")
            payload, reading = self.codec.read(value, reader_version=reader_version, event_type=event_type)
            return payload, reading.writer.event_type, reading.writer.aggregate_type
        decoded = self.json.decode(value, event_type=event_type, aggregate_type=aggregate_type)
        decoded = self._held_to_schema(decoded, aggregate_hint, event_type, reader_version)
        return decoded.payload, decoded.event_type, decoded.aggregate_type

    def _held_to_schema(self, decoded: DecodedEvent, aggregate_type: str, event_type: str | None, version: int | None) -> DecodedEvent:
        if self.codec is None or not event_type:
            return decoded
        try:
            schema = self.codec.repository.get(aggregate_type, event_type, version)
        except UnknownEventError:
            return decoded  # no schema for this event: JSON is read as it is
        try:
            payload = conform(schema, decoded.payload)
        except Invalid as exc:
            raise _SchemaMismatch(_misfit(schema.label, exc)) from None
        return DecodedEvent(payload, decoded.event_type, decoded.aggregate_type, "json", reader_version=schema.version)


def _malformed_id(at: At, event_id: str | None) -> DecodeError:
    """The record's missing or malformed id (checked by :func:`~postbox.ids.is_event_id` first:
    the reason is worked out only for a record that fails)."""
    if event_id is None:
        what = "has no 'id' header"
    else:
        what = f"has a malformed 'id' header {event_id[:80]!r}: it {event_id_problem(event_id)}"
    return DecodeError(f"record {where(at)} {what} (the event id is the dedupe key)")


class _SchemaMismatch(PostboxError):
    def __init__(self, message: str) -> None:
        super().__init__(message)


def _misfit(label: str, exc: Invalid) -> str:
    shown = repr(exc.value)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    where = f"field {exc.path!r}" if exc.path else "payload"
    value = "" if exc.problem.startswith("is missing") else f" = {shown}"
    joint = " " if exc.problem.startswith(("is ", "has ", "fits ")) else ": "
    return f"JSON payload does not fit {label}: {where}{value}{joint}{exc.problem}"


def where(at: At) -> str:
    """``topic[partition]@offset``, as every error message names a record (like :attr:`Origin.where`)."""
    return f"{at[0]}[{at[1]}]@{at[2]}"


def aggregate_from_topic(topic: str) -> str:
    return topic[len(TOPIC_PREFIX):] if topic.startswith(TOPIC_PREFIX) else topic


def _headers(raw_headers: Sequence[tuple[str, object]]) -> tuple[dict[str, str], RouterMeta]:
    """Every header's text (null: ``""``; the last of a repeated name wins) and the router's
    metadata (:func:`~postbox.codec.headers.router_meta`: no object built), each header decoded once. One comprehension when every value is bytes of
    valid UTF-8 (the router writes no null; strict decoding is the faster one): this runs once per
    record; anything else (a null, a str, bytes to replace) takes :func:`_headers_with_nulls`."""
    try:
        headers = {key: raw.decode() for key, raw in raw_headers}  # type: ignore[attr-defined]  # bytes, else AttributeError
    except (AttributeError, UnicodeDecodeError):  # a null (None) or str value, or bytes that are not UTF-8
        return _headers_with_nulls(raw_headers)
    return headers, router_meta(headers)


def _headers_with_nulls(raw_headers: Sequence[tuple[str, object]]) -> tuple[dict[str, str], RouterMeta]:
    """:func:`_headers` when a value is not bytes of valid UTF-8: bad bytes are replaced (U+FFFD),
    a null reads as ``""`` but is absent from the metadata (a null ``id`` is a missing id, and a
    null after a value leaves the value in force)."""
    headers: dict[str, str] = {}
    present: dict[str, str] = {}
    for key, raw in raw_headers:
        if raw is None:
            headers[key] = ""
            continue
        text = raw.decode("utf-8", "replace") if isinstance(raw, (bytes, bytearray)) else str(raw)
        headers[key] = present[key] = text
    return headers, router_meta(present)


def parse_created_at(text: str | None) -> datetime | None:
    """The ``created_at`` header: ISO-8601 (``Z`` or offset), or epoch millis/micros; None if unreadable."""
    if not text:
        return None
    if text[0] != "-" and not text[0].isspace() and not text[-1].isspace() and not text.isdigit():
        # The router's ISO-8601 text, the common case, parsed as it is: one C call where the
        # general path below took five (~600 instructions per record). What it refuses goes on.
        try:
            parsed = _from_iso(text)
        except ValueError:
            pass
        else:
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
    return _parse_any_created_at(text)


def _parse_any_created_at(text: str) -> datetime | None:
    """:func:`parse_created_at` of any text: stripped, epoch millis or micros, else ISO-8601."""
    text = text.strip()
    try:
        if text.lstrip("-").isdigit():
            number = int(text)
            seconds = number / 1_000_000 if abs(number) > 10**14 else number / 1000
            return datetime.fromtimestamp(seconds, timezone.utc)
        value = _iso_datetime(text)
    except (ValueError, OverflowError, OSError):
        return None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


_from_iso = datetime.fromisoformat


def _iso_datetime(text: str) -> datetime:
    """``fromisoformat`` with ``Z`` read as UTC anywhere Python 3.10 read ``+00:00``. Python 3.11
    reads a ``Z`` designator itself, so the text Debezium sends (``...:09.123456Z``) is parsed as
    it is (one string copy less per record); what it refuses is tried again with ``Z`` replaced, as
    before (``2024-05-06Z``, a date with a designator, is a time only that way)."""
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))


__all__ = ["At", "Decoder", "Routed", "aggregate_from_topic", "parse_created_at", "where"]
