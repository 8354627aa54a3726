"""A batch of events as the bytes of one binary COPY, every check and every encoding done first.

Why: ``emit_many`` of a large batch spent most of its time in Python before any SQL, per event:
a row object, a parameter tuple, the same type and schema checks, an id made under a lock, then
psycopg dumping six Python lists into arrays. Here one pass over the events writes each row
straight into the COPY stream (``sql/copy_many.sql``), and what events of one kind (aggregate
type, event type, schema version, traceparent) share is checked and encoded once per batch
(:class:`BatchKind`): its column bytes, its schema and writer, its deliverability. Per event
only the key and the payload are checked, the payload encoded in place by the schema's one-pass
writer. Nothing is sent until every event has passed, so a bad event refuses the whole batch
with the caller's transaction untouched, the error naming its index.

The same :class:`EncodedBatch` also gives the rows of the one-statement INSERT
(:meth:`EncodedBatch.rows`), for what COPY cannot serve (a pipelined connection, a small batch),
so one set of checks decides both forms.
"""

from __future__ import annotations

import bisect
import itertools
import struct
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

from postbox.codec.compiled_writer import Write
from postbox.errors import PostboxError
from postbox.outbox.deliverable import MAX_KEY_BYTES
from postbox.outbox.records import EmittedEvent, NewEvent, PreparedRow, emitted_events
from postbox.outbox.uuid7 import uuid7_block, uuids_from_block

#: The binary COPY header (signature, flags, no extension) and trailer (PostgreSQL's COPY docs).
COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)
COPY_TRAILER = b"\xff\xff"
#: How much of the stream is handed to the connection at a time: the events returned are made
#: between two pieces, while the server reads the last one.
COPY_PIECE = 64 * 1024

_LENGTH = struct.Struct(">i")
_pack_length = _LENGTH.pack
_pack_length_into = _LENGTH.pack_into
#: The id column's length (a uuid is 16 bytes).
ID_LENGTH = _pack_length(16)
_NULL = _pack_length(-1)
_IDS = struct.Struct("16s")
#: A binary array's header: one dimension, whether it holds a NULL, the element type, its length, lower bound 1.
_ARRAY_HEADER = struct.Struct(">iiiii")
_TEXT_OID = 25
#: The element types of the INSERT form's first five arrays (pg_type: uuid, text, text, text, bytea).
_ELEMENT_OIDS = (2950, _TEXT_OID, _TEXT_OID, _TEXT_OID, 17)


def _array(elements: bytearray, count: int, oid: int, *, has_null: bool = False) -> bytes:
    return _ARRAY_HEADER.pack(1, 1 if has_null else 0, oid, count, 1) + elements


class BatchKind(NamedTuple):
    """What every event of one kind in a batch shares, checked once (by
    :meth:`~postbox.outbox.rows.RowFactory.batch_kind`): the bytes its rows start with, how its
    payloads are written, and the fields of the events returned."""

    #: The field count, the aggregate_type, event_type and traceparent columns, and the id's length.
    prefix: bytes
    #: What a payload column starts with: its length (filled in after) and, for Avro, the marker
    #: and the schema fingerprint.
    head: bytes
    #: The schema's one-pass writer (True: written), or None: every payload takes ``encode``.
    write: Write | None
    #: A payload's whole encoding through the general path; raises naming what is wrong.
    encode: Callable[[Any], bytes]
    #: The key checked by every rule, as the Kafka key (str); raises naming why not.
    key: Callable[[Any], str]
    #: The largest encoded payload (bytes), and the PayloadError of one larger.
    limit: int
    too_large: Callable[[int], Exception]
    #: The EmittedEvent fields of this kind: aggregate_type, event_type, schema_version, traceparent.
    fields: tuple[str, str, int | None, str | None]
    #: The aggregate_type, event_type and traceparent columns as binary fields (:func:`copy_field`).
    columns: tuple[bytes, bytes, bytes]
    #: Whether its text columns are ASCII (then they read alike in every client encoding).
    ascii: bool


#: The kind of ``(aggregate_type, event_type, version, traceparent)``, its checks passed.
KindFor = Callable[[Any, Any, Any, Any], BatchKind]


def copy_field(value: str | None) -> bytes:
    """One text column as binary COPY carries it: its length and its UTF-8 bytes (NULL: -1)."""
    if value is None:
        return _NULL
    data = value.encode()
    return _pack_length(len(data)) + data


class EncodedBatch:
    """A batch that passed every check: the COPY stream of its rows, and the events it writes.

    The returned events (:meth:`events`) are made apart from the checks: the COPY path makes them
    between the pieces it sends (:meth:`copy_pieces`), while the server is busy with the rows.
    """

    __slots__ = ("data", "ids", "runs", "keys", "ascii", "_made", "_kinds")

    def __init__(self, data: bytearray, ids: bytes, runs: list[tuple[int, BatchKind]], keys: list[str], ascii: bool) -> None:
        self.data = data
        #: The events' ids, 16 bytes each (:func:`~postbox.outbox.uuid7.uuid7_block`).
        self.ids = ids
        #: (first event, kind) of each run of events of one kind, in order.
        self.runs = runs
        #: Each event's key (the Kafka key, as checked).
        self.keys = keys
        self.ascii = ascii
        self._made: list[EmittedEvent] = []
        self._kinds: list[BatchKind] | None = None

    @property
    def kinds(self) -> list[BatchKind]:
        """Each event's kind (the runs, spelt out)."""
        if self._kinds is None:
            self._kinds = list(itertools.chain.from_iterable(itertools.repeat(kind, n) for kind, n in self._runs_between(0, len(self.keys))))
        return self._kinds

    def __len__(self) -> int:
        return len(self.keys)

    def events(self) -> list[EmittedEvent]:
        """What was written, in order (made once)."""
        self._make(len(self.keys))
        return self._made

    def event_ids(self) -> list[uuid.UUID]:
        """The events' ids, in order."""
        return [event.id for event in self.events()]

    def copy_pieces(self) -> Iterator[memoryview]:
        """The COPY stream in pieces of :data:`COPY_PIECE` bytes; the events of each piece's rows
        are made after it is handed over (the stream ends with the trailer)."""
        data, n = self.data, len(self.keys)
        total = len(data)
        with memoryview(data) as view:
            for start in range(0, total, COPY_PIECE):
                yield view[start:start + COPY_PIECE]
                self._make(min(n, n * (start + COPY_PIECE) // total))
        self._make(n)

    def rows(self) -> list[PreparedRow]:
        """The batch as the rows of the one-statement INSERT (the same values, the payloads cut
        out of the stream)."""
        events = self.events()
        data, rows = self.data, []
        pos = len(COPY_HEADER)
        for event, kind in zip(events, self.kinds):
            pos += len(kind.prefix) + 16
            pos += 4 + _LENGTH.unpack_from(data, pos)[0]  # the key
            size = _LENGTH.unpack_from(data, pos)[0]
            payload = bytes(data[pos + 4:pos + 4 + size])
            pos += 4 + size
            rows.append(PreparedRow(event, (event.id, event.aggregate_type, event.aggregate_id, event.event_type,
                                            payload, event.traceparent)))
        return rows

    def arrays(self, max_rows: int, max_payload_bytes: int) -> Iterator[tuple[int, int, tuple[bytes, ...]]]:
        """The INSERT form's columns, chunk by chunk: ``(first row, end row, six arrays)``, each
        array in PostgreSQL's binary format (id, aggregate_type, aggregate_id, event_type, payload,
        traceparent), cut from the COPY stream: an array element is a COPY field, its length and
        its bytes. A chunk holds at most ``max_rows`` rows, and more than ``max_payload_bytes`` of
        payload only when one row does."""
        data, kinds = self.data, self.kinds
        unpack = _LENGTH.unpack_from
        with memoryview(data) as view:
            pos, start, n = len(COPY_HEADER), 0, len(kinds)
            while start < n:
                columns = [bytearray() for _ in range(6)]
                ids, types, keys, events, payloads, traces = columns
                size, row, nulls = 0, start, False
                while row < n and (row == start or (row - start < max_rows and size <= max_payload_bytes)):
                    kind = kinds[row]
                    at = pos + len(kind.prefix)
                    ids += view[at - 4:at + 16]  # the id's length (the prefix's end) and the id
                    at += 16
                    end = at + 4 + unpack(data, at)[0]
                    keys += view[at:end]
                    length = unpack(data, end)[0]
                    pos = end + 4 + length
                    payloads += view[end:pos]
                    size += length
                    aggregate_type, event_type, trace = kind.columns
                    types += aggregate_type
                    events += event_type
                    traces += trace
                    nulls = nulls or trace == _NULL
                    row += 1
                count = row - start
                yield start, row, (*(_array(column, count, oid) for column, oid in zip(columns[:5], _ELEMENT_OIDS)),
                                   _array(traces, count, _TEXT_OID, has_null=nulls))
                start = row

    def _make(self, stop: int) -> None:
        """Make the returned events up to ``stop``, a column at a time (:func:`emitted_events`):
        what a kind shares repeated over its run, the ids and keys as they are."""
        made = self._made
        start = len(made)
        if stop <= start:
            return
        runs = list(self._runs_between(start, stop))
        made += emitted_events(uuids_from_block(self.ids, start, stop), _spread(runs, 0), self.keys[start:stop],
                               _spread(runs, 1), _spread(runs, 2), _spread(runs, 3))

    def _runs_between(self, start: int, stop: int) -> Iterator[tuple[BatchKind, int]]:
        """(kind, how many) of each run's part between events ``start`` and ``stop``."""
        runs = self.runs
        at = max(0, bisect.bisect_right(runs, start, key=_first) - 1)  # the run event ``start`` is in
        while at < len(runs) and runs[at][0] < stop:
            first, kind = runs[at]
            end = runs[at + 1][0] if at + 1 < len(runs) else len(self.keys)
            yield kind, min(end, stop) - max(first, start)
            at += 1


def _first(run: tuple[int, BatchKind]) -> int:
    return run[0]


def _spread(runs: list[tuple[BatchKind, int]], field: int) -> Iterator[Any]:
    """Field ``field`` of each run's kind's :attr:`BatchKind.fields`, once per event of the run."""
    return itertools.chain.from_iterable(itertools.repeat(kind.fields[field], n) for kind, n in runs)


def encode_batch(events: Sequence[NewEvent], kind_for: KindFor) -> EncodedBatch:
    """Check and encode ``events`` (in order) into one :class:`EncodedBatch`, or raise naming the
    first bad event by its index; ``kind_for`` checks what a kind shares and is asked once per kind."""
    n = len(events)
    ids = uuid7_block(n)
    out = bytearray(COPY_HEADER)
    keys: list[str] = []
    try:
        runs, all_ascii = _encode_rows(events, ids, kind_for, out, keys)
    except Exception as exc:  # noqa: BLE001 - every error is re-raised, saying which event it is about
        refused = _in_batch(exc, events, len(keys))  # the events before it each appended their key
        if refused is exc:
            raise
        raise refused from exc
    out += COPY_TRAILER
    return EncodedBatch(out, ids, runs, keys, all_ascii)


def _encode_rows(events: Sequence[NewEvent], ids: bytes, kind_for: KindFor, out: bytearray,
                 keys: list[str]) -> tuple[list[tuple[int, BatchKind]], bool]:
    """Append the COPY row of each event to ``out`` and its key to ``keys``; returns the runs of
    kinds and whether every text column is ASCII. Raises at the first bad event.

    One loop on purpose: it runs once per event of every large batch, and each call or object
    saved in it is saved ten thousand times in a batch of ten thousand. An event of the same kind
    as the one before it (the same name objects, no options) finds its kind without a lookup.
    """
    runs: list[tuple[int, BatchKind]] = []
    known: dict[Any, BatchKind] = {}
    all_ascii = True
    last_type: Any = _NOTHING
    last_event: Any = _NOTHING
    for event, (event_id,) in zip(events, _IDS.iter_unpack(ids)):
        aggregate_type, event_type = event.aggregate_type, event.event_type
        if aggregate_type is not last_type or event_type is not last_event or event.version is not None \
                or event.traceparent is not None:
            kind, last_type, last_event = _kind_of(event, known, kind_for)
            prefix, head, write, limit = kind.prefix, kind.head, kind.write, kind.limit
            all_ascii &= kind.ascii
            runs.append((len(keys), kind))
        key = event.aggregate_id
        # The key at a glance (deliverable.plain_key, inline); any other key takes every rule.
        if type(key) is not str or not (0 < len(key) <= MAX_KEY_BYTES and key.isascii() and "\x00" not in key):
            key = kind.key(key)
            all_ascii &= key.isascii()
        data = key.encode()
        out += prefix
        out += event_id
        out += _pack_length(len(data))
        out += data
        mark = len(out)
        out += head
        payload = event.payload
        written = False
        if write is not None and type(payload) is dict:
            try:
                written = write(payload, out)
            except Exception:  # noqa: BLE001 - e.g. a float beyond its range: the general path decides
                written = False
        if not written:
            del out[mark + 4:]
            out += kind.encode(payload)
        size = len(out) - mark - 4
        if size > limit:
            raise kind.too_large(size)
        _pack_length_into(out, mark, size)
        keys.append(key)
    return runs, all_ascii


#: No event's name is this object: the kind of the event before the first is nothing.
_NOTHING = object()


def _kind_of(event: NewEvent, known: dict[Any, BatchKind], kind_for: KindFor) -> tuple[BatchKind, Any, Any]:
    """``event``'s kind, and the names the next event may be recognised by (``_NOTHING``: none).

    Exact str names and no options: the kind is found by its names alone, asked of ``kind_for``
    once per batch. Anything else is asked of ``kind_for`` (its options checked) for every event,
    as emit does."""
    aggregate_type, event_type, version, trace = event.aggregate_type, event.event_type, event.version, event.traceparent
    if version is not None or trace is not None or type(aggregate_type) is not str or type(event_type) is not str:
        return kind_for(aggregate_type, event_type, version, trace), _NOTHING, _NOTHING
    kind = known.get((aggregate_type, event_type))
    if kind is None:
        kind = known[(aggregate_type, event_type)] = kind_for(aggregate_type, event_type, None, None)
    return kind, aggregate_type, event_type


#: What an element of a batch must have (a :class:`NewEvent`, or an object with its fields).
_EVENT_FIELDS = ("aggregate_type", "aggregate_id", "event_type", "payload", "version", "traceparent")


def _in_batch(exc: Exception, events: Sequence[Any], index: int) -> Exception:
    """``exc`` saying which event of the batch it is about: the same object, its class, fields,
    cause and traceback kept (a PostboxError's or a TypeError's message starts with where; any
    other exception gets a note). An element that is not an event at all is a TypeError of its own."""
    where = f"emit_many: events[{index}] (of {len(events)})"
    event = events[index] if index < len(events) else None
    if isinstance(exc, AttributeError) and not all(hasattr(event, name) for name in _EVENT_FIELDS):
        return TypeError(f"{where} is a {type(event).__name__}, not a NewEvent: nothing was sent; pass "
                         "NewEvent(aggregate_type, aggregate_id, event_type, payload) for each event")
    if isinstance(exc, PostboxError):
        exc.message = f"{where}: {exc.message}"
        exc.args = (exc.message, *exc.args[1:])
    elif isinstance(exc, TypeError) and exc.args and isinstance(exc.args[0], str):
        exc.args = (f"{where}: {exc.args[0]}", *exc.args[1:])
    else:
        exc.add_note(where)
    return exc


__all__ = ["COPY_HEADER", "COPY_PIECE", "COPY_TRAILER", "ID_LENGTH", "BatchKind", "EncodedBatch", "copy_field", "encode_batch"]
