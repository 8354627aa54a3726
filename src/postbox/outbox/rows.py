"""Turning an emit call into an outbox row: everything that happens before any SQL is sent.

Kept apart from the sync and async writers so both share it exactly: resolve the schema, validate
and encode the payload, make the UUIDv7 id, capture the traceparent. Any problem raises here,
so the caller's transaction has not been touched and stays usable.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from collections.abc import Callable, Iterable
from typing import Any, Mapping, NamedTuple, Unpack

from postbox.codec.avro import MARKER, AvroCodec
from postbox.codec.compiled_writer import Write
from postbox.codec.json_codec import JsonCodec
from postbox.errors import PayloadError
from postbox.payloads.instance import EventPayload, as_mapping
from postbox.outbox.batch import ID_LENGTH, BatchKind, EncodedBatch, copy_field, encode_batch
from postbox.outbox.records import AggregateId, EmitOptions, EmittedEvent, NewEvent, PreparedRow, emitted_event
from postbox.outbox.deliverable import aggregate_type_problem, event_type_problem, key_problem, plain_key, shown
from postbox.outbox.trace import resolve_traceparent
from postbox.outbox.table_statements import DEFAULT_STATEMENTS
from postbox.outbox.uuid7 import uuid7
from postbox.resources import schemas_dir as resolve_schemas_dir
from postbox.schemas.repository import EventSchema, SchemaRepository


#: The default pipeline's single-row INSERT and DELETE (:mod:`postbox.outbox.table_statements`).
INSERT_SQL = DEFAULT_STATEMENTS.insert
MAX_PAYLOAD_ENV = "POSTBOX_MAX_PAYLOAD_BYTES"
#: Below Kafka's default 1 MiB record limit (broker message.max.bytes, Connect's max.request.size),
#: leaving room for the key and the router's headers.
MAX_PAYLOAD_BYTES = int(os.environ.get(MAX_PAYLOAD_ENV) or 1_000_000)
DELETE_SQL = DEFAULT_STATEMENTS.delete
#: A binary COPY row's field count (six columns), and a length to be filled in.
_FIELD_COUNT = b"\x00\x06"
_NO_LENGTH = bytes(4)


class _Known(NamedTuple):
    """An event type already emitted at its latest schema: what the next emit of it needs, found
    once (its schema, the schema's one-pass writer, and the payload's first ten bytes)."""

    schema: EventSchema
    write: Write
    head: bytes


#: How many event types the fast path remembers (ever-new names cannot grow it past this).
_KNOWN_MAX = 4096


class RowFactory:
    """Validates, encodes and stamps events; ``encoding`` is "avro" (default) or "json".

    The Avro schemas come from ``codec``, else from ``schemas_dir``, else from the configured
    folder (``POSTBOX_SCHEMAS_DIR``, else ``./schemas``), loaded at the first emit.
    """

    def __init__(
        self, codec: AvroCodec | None = None, *, encoding: str = "avro", schemas_dir: Path | str | None = None
    ) -> None:
        if encoding not in ("avro", "json"):
            raise ValueError(f"encoding must be 'avro' or 'json', not {encoding!r}")
        if codec is not None and schemas_dir is not None:
            raise ValueError("pass codec= (a loaded repository) or schemas_dir= (a folder), not both")
        self.encoding = encoding
        self._codec = codec
        # A folder that does not exist is a configuration error now, not at the first emit.
        self._schemas_dir = resolve_schemas_dir(schemas_dir) if schemas_dir is not None else None
        self._json = JsonCodec()
        #: (aggregate_type, event_type) → _Known, for emits without options (see :meth:`prepare`).
        self._known: dict[tuple[str, str], _Known] = {}

    @property
    def codec(self) -> AvroCodec:
        if self._codec is None:
            repository = SchemaRepository.load(self._schemas_dir) if self._schemas_dir else None
            self._codec = AvroCodec(repository)
        return self._codec

    def prepare(self, aggregate_type: str, aggregate_id: AggregateId, event_type: str, payload: EventPayload,
                **options: Unpack[EmitOptions]) -> PreparedRow:
        """One event as its outbox row; raises (naming what is wrong) before anything is sent.

        The common emit (no options, a ``dict`` payload, a plain ``str`` key) of an event type this
        factory has emitted before takes :meth:`_prepare_known`: the type's rules, its schema and
        its writer were found then, so only the key and the payload are checked.
        """
        if not options and type(payload) is dict and type(aggregate_id) is str:
            known = self._known.get((aggregate_type, event_type))
            if known is not None and plain_key(aggregate_id):
                return self._prepare_known(known, aggregate_type, aggregate_id, event_type, payload)
        if options:
            _check_options(options)
        key = _key(aggregate_type, aggregate_id, event_type)
        body, schema_version = self._body(aggregate_type, event_type, payload, options.get("version"))
        event_id = options.get("event_id")
        row = _row(event_id if event_id is not None else uuid7(), aggregate_type, key, event_type,
                   schema_version, resolve_traceparent(options.get("traceparent")), body)
        if options.get("version") is None and self.encoding == "avro":
            self._remember(aggregate_type, event_type)
        return row

    def _prepare_known(self, known: _Known, aggregate_type: str, aggregate_id: str, event_type: str,
                       payload: dict[str, Any]) -> PreparedRow:
        """:meth:`prepare` for an event type already emitted, no options, a plain key: the same
        row, the same errors (the payload's, from the same writer or the codec's general path)."""
        out = bytearray(known.head)
        try:
            written = known.write(payload, out)
        except Exception:  # noqa: BLE001 - e.g. a float beyond its range: the general path decides
            written = False
        body = bytes(out) if written else self.codec.encode_general(known.schema, payload)
        if len(body) > MAX_PAYLOAD_BYTES:
            raise _too_large(aggregate_type, event_type, len(body))
        return _row(uuid7(), aggregate_type, aggregate_id, event_type, known.schema.version,
                    resolve_traceparent(None), body)

    def _remember(self, aggregate_type: str, event_type: str) -> None:
        """Note an event type that passed every check at its latest schema, for the fast path."""
        pair = (aggregate_type, event_type)
        if pair in self._known or len(self._known) >= _KNOWN_MAX:
            return
        if type(aggregate_type) is str and type(event_type) is str:
            schema = self.codec.schema_for(aggregate_type, event_type)
            self._known[pair] = _Known(schema, self.codec.writer_for(schema), MARKER + schema.fingerprint)

    def prepare_event(self, event: NewEvent) -> PreparedRow:
        return self.prepare(
            event.aggregate_type,
            event.aggregate_id,
            event.event_type,
            event.payload,
            version=event.version,
            traceparent=event.traceparent,
        )

    def prepare_many(self, events: Iterable[NewEvent]) -> list[PreparedRow]:
        """``prepare_event`` of each event, in order, as the rows of one INSERT: the checks and
        encoding of :meth:`encode_batch` (what differs from one emit per event: the ids are made
        in one go, the ambient trace context read once, and an error names the event's index)."""
        return self.encode_batch(events).rows()

    def encode_batch(self, events: Iterable[NewEvent]) -> EncodedBatch:
        """Every event checked and encoded, in order, into the rows of one binary COPY
        (:mod:`postbox.outbox.batch`); raises, naming the first bad event's index, before any SQL."""
        batch = events if isinstance(events, list) else list(events)
        ambient = resolve_traceparent(None)
        return encode_batch(batch, lambda aggregate_type, event_type, version, traceparent: self.batch_kind(
            aggregate_type, event_type, version, traceparent, ambient))

    def batch_kind(self, aggregate_type: Any, event_type: Any, version: Any, traceparent: Any,
                   ambient: str | None) -> BatchKind:
        """What every event of a batch with these names and options shares, checked as
        :meth:`prepare` checks them (the options, the names' deliverability, the traceparent, the
        schema); ``ambient`` is the trace context read once for the batch."""
        if version is not None or traceparent is not None:
            _check_options({"version": version, "traceparent": traceparent})
        _raise_if_problem(aggregate_type, event_type, "aggregate_type", aggregate_type, aggregate_type_problem(aggregate_type))
        _raise_if_problem(aggregate_type, event_type, "event_type", event_type, event_type_problem(event_type))
        trace = ambient if traceparent is None else resolve_traceparent(traceparent)
        head, write, encode, schema_version = self._batch_encoding(aggregate_type, event_type, version)
        columns = (copy_field(aggregate_type), copy_field(event_type), copy_field(trace))
        return BatchKind(
            prefix=_FIELD_COUNT + b"".join(columns) + ID_LENGTH, columns=columns,
            head=head, write=write, encode=encode,
            key=lambda aggregate_id: _key(aggregate_type, aggregate_id, event_type),
            limit=MAX_PAYLOAD_BYTES, too_large=lambda size: _too_large(aggregate_type, event_type, size),
            fields=(aggregate_type, event_type, schema_version, trace), ascii=event_type.isascii(),
        )

    def _batch_encoding(self, aggregate_type: str, event_type: str,
                        version: int | None) -> tuple[bytes, Write | None, Callable[[Any], bytes], int | None]:
        """How a batch writes this event type's payloads: the payload column's head (its length,
        filled in after, then the Avro marker and fingerprint), the one-pass writer, the general
        path (naming the misfit, as :meth:`_body`), and the schema version."""
        if self.encoding != "avro":
            return _NO_LENGTH, None, lambda payload: self._body(aggregate_type, event_type, payload, None)[0], None
        codec = self.codec
        schema = codec.schema_for(aggregate_type, event_type, version)

        def encode(payload: Any) -> bytes:
            if type(payload) is dict:  # the writer was not sure of it: only the general path decides
                return codec.encode_general(schema, payload)
            return codec.encode_with(schema, as_mapping(payload))

        return _NO_LENGTH + MARKER + schema.fingerprint, codec.writer_for(schema), encode, schema.version

    def _body(
        self, aggregate_type: str, event_type: str, payload: EventPayload, version: int | None
    ) -> tuple[bytes, int | None]:
        """The payload checked and encoded (Avro or JSON), within the size limit, and its schema version."""
        fields: Mapping[str, Any] = as_mapping(payload)  # a payload class instance encodes as its fields
        if self.encoding == "avro":
            schema = self.codec.schema_for(aggregate_type, event_type, version)
            body = self.codec.encode_with(schema, fields)
            schema_version: int | None = schema.version
        else:
            if not isinstance(fields, Mapping):
                raise PayloadError(
                    f"{event_type}: payload must be a mapping, got {type(fields).__name__}",
                    event_type=event_type,
                    value=fields,
                )
            body = self._json.encode(fields)
            schema_version = None
        if len(body) > MAX_PAYLOAD_BYTES:
            raise _too_large(aggregate_type, event_type, len(body))
        return body, schema_version


def _too_large(aggregate_type: str, event_type: str, size: int) -> PayloadError:
    return PayloadError(
        f"{aggregate_type}/{event_type}: encoded payload is {size:,} bytes, over the {MAX_PAYLOAD_BYTES:,}-byte limit "
        "(Kafka refuses records over ~1 MB by default: the connector could never deliver it)",
        event_type=event_type,
        field="payload",
        value=f"<{size} bytes>",
        fix=f"keep large data elsewhere and put a reference in the event, or raise {MAX_PAYLOAD_ENV} together with the broker's and Connect's size limits",
    )


_OPTION_NAMES = frozenset(EmitOptions.__annotations__)


#: The type each option takes (None, the default, is always accepted); keys are EmitOptions'.
_OPTION_TYPES: dict[str, type] = {"version": int, "traceparent": str, "event_id": uuid.UUID}
assert _OPTION_TYPES.keys() == _OPTION_NAMES, "every emit option has its type here"

#: What to write instead, for the wrong types callers plausibly pass.
_OPTION_FIXES = {"event_id": " (pass uuid.UUID(text) for an id you hold as text)", "version": " (a schema version: 1, 2, ...)"}


def _check_options(options: Mapping[str, Any]) -> None:
    """Refuse an option that is misspelt or of the wrong type, naming it, before anything is sent.

    Type checkers catch both; this catches them for callers without one, as a plain keyword
    parameter would. Without it a str ``event_id`` reached PostgreSQL (a type error there aborts the
    caller's whole transaction), ``version=True`` silently wrote version 1 (bool is an int) and
    ``traceparent=5`` failed inside a regular expression, naming nothing."""
    if not options.keys() <= _OPTION_NAMES:
        _refuse_unknown_options(options)
    for name, value in options.items():
        expected = _OPTION_TYPES[name]
        if value is not None and (not isinstance(value, expected) or isinstance(value, bool)):
            raise TypeError(f"emit option {name}={value!r} is a {type(value).__name__}; it takes "
                            f"{expected.__name__} or None{_OPTION_FIXES.get(name, '')}")


def _refuse_unknown_options(options: Mapping[str, Any]) -> None:
    """A misspelt option (``versoin=2``) must not be ignored: type checkers catch it, this catches
    it for callers without one, as a plain keyword parameter would."""
    unknown = ", ".join(sorted(set(options) - _OPTION_NAMES))
    raise TypeError(f"emit got unexpected keyword argument(s) {unknown}; the options are {', '.join(sorted(_OPTION_NAMES))}")


def _key(aggregate_type: str, aggregate_id: AggregateId, event_type: str) -> str:
    """The Kafka key as a string, refused (naming why) when the connector could not deliver it."""
    if isinstance(aggregate_id, (int, uuid.UUID)) and not isinstance(aggregate_id, bool):
        aggregate_id = str(aggregate_id)
    if not isinstance(aggregate_id, str) or not aggregate_id:
        raise PayloadError(
            f"{shown(str(aggregate_type))}/{shown(str(event_type))}: aggregate_id {aggregate_id!r} must be a non-empty "
            "string (it is the Kafka key)",
            event_type=event_type,
            field="aggregate_id",
            value=aggregate_id,
            fix="nothing was written; pass the aggregate's id as a non-empty str, an int or a UUID",
        )
    _require_deliverable(aggregate_type, aggregate_id, event_type)
    return aggregate_id


def _row(
    event_id: uuid.UUID, aggregate_type: str, aggregate_id: str, event_type: str,
    schema_version: int | None, trace: str | None, body: bytes,
) -> PreparedRow:
    event = emitted_event(event_id, aggregate_type, aggregate_id, event_type, schema_version, trace)
    return PreparedRow(event, (event_id, aggregate_type, aggregate_id, event_type, body, trace))


def _require_deliverable(aggregate_type: str, aggregate_id: str, event_type: str) -> None:
    """Refuse a row the connector could never publish: it would stop every event behind it.

    The (aggregate_type, event_type) pairs already found deliverable are remembered: an emit then
    checks only its key, and no message is formatted unless something is wrong.
    """
    pair = (aggregate_type, event_type)
    known = type(aggregate_type) is str and type(event_type) is str and pair in _DELIVERABLE_TYPES
    if not known:
        _raise_if_problem(aggregate_type, event_type, "aggregate_type", aggregate_type, aggregate_type_problem(aggregate_type))
    problem = key_problem(aggregate_id)
    if problem is not None:
        size = f"<{len(aggregate_id.encode('utf-8', 'surrogatepass')):,} bytes>"
        _raise_if_problem(aggregate_type, event_type, "aggregate_id", size, problem)
    if not known:
        _raise_if_problem(aggregate_type, event_type, "event_type", event_type, event_type_problem(event_type))
        if len(_DELIVERABLE_TYPES) < _DELIVERABLE_TYPES_MAX:
            _DELIVERABLE_TYPES.add(pair)


#: Deliverable (aggregate_type, event_type) pairs seen; bounded, so ever-new names cannot grow it.
_DELIVERABLE_TYPES: set[tuple[str, str]] = set()
_DELIVERABLE_TYPES_MAX = 4096


def _raise_if_problem(aggregate_type: object, event_type: object, field_name: str, value: object, problem: str | None) -> None:
    if problem is not None:
        raise PayloadError(
            f"{shown(str(aggregate_type))}/{shown(str(event_type))}: {problem}; the connector could never publish this row",
            event_type=str(event_type),
            field=field_name,
            value=value,
            fix="nothing was written; see docs/writer.md#what-the-connector-can-deliver",
        )


__all__ = [
    "DELETE_SQL", "INSERT_SQL", "MAX_PAYLOAD_BYTES", "MAX_PAYLOAD_ENV", "RowFactory",
    # what an emit takes and gives back, defined in postbox.outbox.records, found here as before
    "AggregateId", "EmitOptions", "EmittedEvent", "NewEvent", "PreparedRow",
]
