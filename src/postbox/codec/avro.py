"""Avro single-object encoding of event payloads, with the writer schema named by fingerprint.

Bytes on the wire: ``C3 01`` (the marker), the writer schema's CRC-64-AVRO fingerprint as 8
little-endian bytes, then the Avro binary body. A reader looks the fingerprint up in the schema
repository to get the writer schema and resolves the body into its own (reader) schema, so a
consumer on v2 reads v1 events (defaults fill the new fields) and one on v1 reads v2 events (new
fields are skipped), as far as the evolution allows.
"""

from __future__ import annotations

import io
import sys
from dataclasses import dataclass
from typing import Any, Mapping

from fastavro import schemaless_reader, schemaless_writer

from postbox.codec.compiled_check import Check, compile_check
from postbox.codec.compiled_writer import Write, compile_writer
from postbox.codec.logical_fields import Conversion, plain_reading
from postbox.codec.logical_fields import apply as apply_logical
from postbox.codec.validate import Invalid, validate
from postbox.errors import DecodeError, PayloadError, UnknownEventTypeError
from postbox.frozen import assemble
from postbox.schemas.repository import EventSchema, SchemaRepository

#: fastavro's compiled ``_read_data(fo, writer_schema, named_schemas, reader_schema, options)``,
#: below schemaless_reader's per-call set-up (see Reading.named): not in fastavro's stubs (a
#: private function; the version is pinned by constraints.txt). None where a fastavro lacks it or
#: its compiled modules: schemaless_reader then reads every value.
_read_data: Any
try:
    from fastavro import _read as _compiled_read

    _read_data = getattr(_compiled_read, "_read_data", None)
except ImportError:
    _read_data = None

MARKER = b"\xc3\x01"
HEADER_LEN = len(MARKER) + 8
#: schemaless_reader's own options (its defaults), built once rather than per record.
_READ_OPTIONS = {"return_record_name": False, "return_record_name_override": False, "handle_unicode_errors": "strict",
                 "return_named_type": False, "return_named_type_override": False}  # fmt: skip


@dataclass(frozen=True)
class DecodedEvent:
    """A payload read back from bytes, with where its schema came from."""

    payload: dict[str, Any]
    event_type: str | None
    aggregate_type: str | None
    encoding: str  # "avro" or "json"
    writer_version: int | None = None
    reader_version: int | None = None
    fingerprint: str | None = None  # hex of the 8 fingerprint bytes (avro only)


def is_single_object(value: bytes) -> bool:
    """True if ``value`` starts with the Avro single-object marker."""
    return value[:2] == MARKER


def split_single_object(value: bytes) -> tuple[bytes, memoryview]:
    """(fingerprint bytes, body) of a single-object-encoded value; DecodeError if it is not one."""
    if len(value) < HEADER_LEN or value[:2] != MARKER:
        head = bytes(value[:4]).hex() or "empty"
        raise DecodeError(
            f"not Avro single-object encoding: {len(value)} bytes starting {head} (expected c301 + 8-byte fingerprint)",
            fix="check the producer; stock-Debezium JSON outboxes must be read with the JSON codec",
        )
    view = memoryview(value)
    return bytes(view[2:HEADER_LEN]), view[HEADER_LEN:]


class AvroCodec:
    """Encode and decode payloads against one schema repository."""

    def __init__(self, repository: SchemaRepository | None = None) -> None:
        self.repository = repository if repository is not None else SchemaRepository.default()
        self._checks: dict[bytes, Check] = {}  # by fingerprint: compiled once, used by every emit
        self._writers: dict[bytes, Write] = {}  # likewise: check and encode in one pass
        #: (writer fingerprint, reader version) → its resolution, found once (the repository is immutable).
        self._readings: dict[tuple[bytes, int | None], Reading] = {}

    # -- writing -----------------------------------------------------------------------------

    def schema_for(self, aggregate_type: str, event_type: str, version: int | None = None) -> EventSchema:
        """The writer schema emit uses: the latest version unless one is pinned."""
        return self.repository.get(aggregate_type, event_type, version)

    def encode(
        self, aggregate_type: str, event_type: str, payload: Mapping[str, Any], version: int | None = None
    ) -> bytes:
        """Validate ``payload`` and return its single-object encoding. PayloadError names the misfit."""
        return self.encode_with(self.schema_for(aggregate_type, event_type, version), payload)

    def encode_with(self, schema: EventSchema, payload: Mapping[str, Any]) -> bytes:
        """``payload``'s single-object encoding under ``schema``. The compiled writer does most
        payloads in one pass; one it is not sure of takes the general path (check, ``validate``
        naming the misfit, fastavro), which gives the same bytes or the same error."""
        write = self.writer_for(schema)
        out = bytearray(MARKER)
        out += schema.fingerprint
        try:
            if write(payload, out):
                return bytes(out)
        except Exception:  # noqa: BLE001 - e.g. a float beyond its range: the general path decides
            pass
        return self.encode_general(schema, payload)

    def writer_for(self, schema: EventSchema) -> Write:
        """``schema``'s one-pass writer (compiled at its first use): it appends a payload's body to
        a buffer and answers True, or answers False (or raises) when only :meth:`encode_general`
        can say what the bytes or the error are."""
        write = self._writers.get(schema.fingerprint)
        if write is None:
            write = self._writers[schema.fingerprint] = compile_writer(schema.parsed, schema.names)
        return write

    def encode_general(self, schema: EventSchema, payload: Mapping[str, Any]) -> bytes:
        """The general path: the compiled check, ``validate`` naming the misfit when it fails, then
        fastavro. Every payload ``encode_with`` is not sure of goes here; the same bytes either way."""
        if not self._passes(schema, payload):
            # Only a payload the compiled check refuses pays for the walk that names the misfit.
            try:
                validate(schema.parsed, schema.names, payload)
            except Invalid as exc:
                raise _payload_error(schema, exc) from None
        buf = io.BytesIO()
        buf.write(MARKER)
        buf.write(schema.fingerprint)
        try:
            schemaless_writer(buf, schema.parsed, payload)
        except Exception as exc:  # validation should have caught it; never let bad bytes out
            raise PayloadError(
                f"{schema.label}: payload does not encode: {exc}", event_type=schema.event_type
            ) from exc
        return buf.getvalue()

    def _passes(self, schema: EventSchema, payload: Any) -> bool:
        check = self._checks.get(schema.fingerprint)
        if check is None:
            check = self._checks[schema.fingerprint] = compile_check(schema.parsed, schema.names)
        try:
            return check(payload)
        except Exception:  # noqa: BLE001 - e.g. a payload nested too deep: validate decides and says why
            return False

    # -- reading -----------------------------------------------------------------------------

    def writer_schema(self, value: bytes) -> EventSchema:
        """The schema a value was written with, found by its fingerprint."""
        fp, _ = split_single_object(value)
        schema = self.repository.by_fingerprint(fp)
        if schema is None:
            raise DecodeError(
                f"unknown writer schema: fingerprint {fp.hex()} is not in the schema repository",
                fix="deploy the producer's schemas/ to this consumer (`postbox schemas list` shows known fingerprints)",
            )
        return schema

    def decode(
        self,
        value: bytes,
        *,
        reader: EventSchema | None = None,
        reader_version: int | None = None,
        event_type: str | None = None,
    ) -> DecodedEvent:
        """Decode ``value`` into the reader schema.

        The reader schema is ``reader`` if given, else version ``reader_version`` of the writer's
        event, else that event's latest version. ``event_type`` (from the Kafka header) is
        checked against the writer schema's, so a mislabelled record is caught, not misread.
        """
        payload, reading = self.read(value, reader=reader, reader_version=reader_version, event_type=event_type)
        return assemble(DecodedEvent, {"payload": payload, **reading.fields})

    def read(
        self,
        value: bytes,
        *,
        reader: EventSchema | None = None,
        reader_version: int | None = None,
        event_type: str | None = None,
    ) -> tuple[Any, "Reading"]:
        """:meth:`decode`'s payload and how it was read (the writer and reader schemas), without
        building a :class:`DecodedEvent`: the consumer's per-record path, which needs the payload
        and the writer's event and aggregate type only. Same checks, same errors."""
        if len(value) < HEADER_LEN or value[:2] != MARKER:
            split_single_object(value)  # raises the DecodeError that says what the bytes are
        fp = bytes(value[2:HEADER_LEN])
        reading = self._readings.get((fp, reader_version)) if reader is None else None
        if reading is None:
            reading = self._reading(fp, reader, reader_version, event_type)
        writer = reading.writer
        if event_type is not None and event_type != writer.event_type:
            raise DecodeError(
                f"header says event type {event_type!r} but the payload was written as {writer.label} (fingerprint {fp.hex()})"
            )
        buf = io.BytesIO(value)
        buf.seek(HEADER_LEN)  # read the body in place: no copy of it
        try:
            if reading.named is not None:
                payload = _read_data(buf, reading.read_as, reading.named, reading.resolve_into, _READ_OPTIONS)
            else:
                payload = schemaless_reader(buf, reading.read_as, reading.resolve_into)
            if reading.logical:
                apply_logical(payload, reading.logical)
        except Exception as exc:
            raise DecodeError(
                f"{writer.label} payload ({len(value) - HEADER_LEN} bytes) cannot be read as {reading.reader.label}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if buf.tell() != len(value):
            raise DecodeError(f"{writer.label} payload has {len(value) - buf.tell()} trailing bytes: corrupt or mislabelled")
        return payload, reading

    def _reading(self, fp: bytes, reader: EventSchema | None, reader_version: int | None, event_type: str | None) -> "Reading":
        """Resolve (writer, reader) for a fingerprint once; cached unless the reader was given."""
        writer = self.repository.by_fingerprint(fp)
        if writer is None and event_type and not self.repository.aggregates_of(event_type):
            raise UnknownEventTypeError(
                f"no schema for event type {event_type!r} here (writer fingerprint {fp.hex()} unknown too)",
                fix=f"deploy the producer's schemas/ for {event_type} to this consumer (`postbox schemas list` shows what it has)",
            )
        if writer is None:
            label = f" ({event_type})" if event_type else ""
            raise DecodeError(
                f"unknown writer schema{label}: fingerprint {fp.hex()} is not in the schema repository",
                fix="deploy the producer's schemas/ to this consumer (`postbox schemas list` shows known fingerprints)",
            )
        given = reader is not None
        if reader is None:
            reader = self.repository.get(writer.aggregate_type, writer.event_type, reader_version)
        reading = Reading(writer, reader)
        if not given:
            self._readings[(fp, reader_version)] = reading
        return reading


class Reading:
    """How values of one writer fingerprint are read into one reader version, resolved once: the
    repository lookups and the DecodedEvent fields that do not depend on the value are the same for
    every record of that (fingerprint, reader version), so the per-record work is fastavro's alone."""

    __slots__ = ("writer", "reader", "resolve_into", "read_as", "named", "logical", "fields")

    def __init__(self, writer: EventSchema, reader: EventSchema) -> None:
        self.writer = writer
        self.reader = reader
        #: The reader schema fastavro resolves into; None (no resolution) when it is the writer's.
        self.resolve_into: Any = None if reader.fingerprint == writer.fingerprint else reader.parsed
        #: The schema fastavro reads with, and the logical-type conversions done after it: the
        #: writer's own schema with its top-level logical types taken off when nothing is resolved
        #: (:mod:`postbox.codec.logical_fields`: ~3 µs less per record), else the writer's as it is.
        plain = plain_reading(writer.parsed) if self.resolve_into is None else None
        self.read_as: Any = writer.parsed if plain is None else plain[0]
        self.logical: tuple[Conversion, ...] = () if plain is None else plain[1]
        #: The named-type tables fastavro's ``_read_data`` reads with, built once: what
        #: ``schemaless_reader`` builds on every call (two dicts, each parsed schema's names copied
        #: in, an options dict) before it calls ``_read_data`` with the same arguments (it reads
        #: them, never writes them). Per OrderPlaced record: 36.2k -> 33.2k instructions without
        #: resolution (cachegrind); v1 bytes into v2, 14.6 -> 9.8 µs (time.process_time, min of 7
        #: rounds of 20,000). None (``schemaless_reader``) where fastavro's compiled reader is
        #: not there or a parsed schema lacks its names table.
        self.named: dict[str, Any] | None = _named_tables(self.read_as, self.resolve_into) if _read_data is not None else None
        if self.named is not None:
            # The same schemas with every name interned: fastavro picks a value's reader by
            # comparing its type name with ~15 str constants in turn ("null", "string", ...), and
            # an interned name is the very object of the constant it equals, found without
            # comparing characters. Per OrderPlaced record: 33.7k -> 32.4k instructions (cachegrind).
            memo: dict[int, Any] = {}
            self.read_as, self.resolve_into = _interned(self.read_as, memo), _interned(self.resolve_into, memo)
            self.named = _interned(self.named, memo)
        #: DecodedEvent's fields but the payload (the value is built in one step: once per record).
        self.fields = {"event_type": writer.event_type, "aggregate_type": writer.aggregate_type, "encoding": "avro",
                       "writer_version": writer.version, "reader_version": reader.version, "fingerprint": writer.fingerprint.hex()}  # fmt: skip


def _interned(node: Any, memo: dict[int, Any]) -> Any:
    """A copy of the parsed schema ``node`` (dicts, lists, str, numbers, None) whose every str,
    key or value, is interned; a dict or list met twice (a named type's table entry and its place
    in the tree) is copied once, so the copy shares what the original shares."""
    if type(node) is str:
        return sys.intern(node)
    if not isinstance(node, (dict, list)):
        return node
    copied = memo.get(id(node))
    if copied is None:
        if isinstance(node, dict):
            copied = memo[id(node)] = {}
            copied.update((_interned(key, memo), _interned(value, memo)) for key, value in node.items())
        else:
            copied = memo[id(node)] = []
            copied.extend(_interned(value, memo) for value in node)
    return copied


def _named_tables(writer: Any, reader: Any) -> dict[str, Any] | None:
    """``{"writer": ..., "reader": ...}``: the named types of the parsed writer schema and of the
    reader schema resolved into (None: none), as ``schemaless_reader`` copies them from each
    schema's ``__named_schemas``; None when a schema has no such table."""
    tables: dict[str, Any] = {"writer": {}, "reader": {}}
    for side, schema in (("writer", writer), ("reader", reader)):
        if schema is None:
            continue
        names = schema.get("__named_schemas") if isinstance(schema, dict) else None
        if names is None:
            return None
        tables[side] = dict(names)
    return tables


def _payload_error(schema: EventSchema, exc: Invalid) -> PayloadError:
    field = exc.path or None
    if field is None:
        message = f"{schema.label}: payload {exc.problem}"
    elif exc.problem.startswith(("is ", "has ")):
        shown = "" if exc.problem.startswith("is missing") else f" = {_short(exc.value)}"
        message = f"{schema.label}: field {field!r}{shown} {exc.problem}"
    else:
        message = f"{schema.label}: field {field!r} = {_short(exc.value)}: {exc.problem}"
    return PayloadError(
        message,
        event_type=schema.event_type,
        field=field,
        value=exc.value,
        fix=f"fields of {schema.event_type}: see {schema.path}" if schema.path else None,
    )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
