"""A batch (``emit_many``) writes exactly what one emit per event writes, checked before any SQL.

What callers rely on: the rows of a batch, in the COPY stream the writer sends or as the INSERT's
rows, are those of ``prepare_event`` for each event in order (only the ids differ: made in one
go, still increasing in order); a batch with one bad event anywhere refuses the whole batch
before anything is sent, with the error ``prepare_event`` gives and the event's index; and the
returned events are what one emit per event returns. No database: the plan is sans-IO.
"""

from __future__ import annotations

import re
import struct
import uuid
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from postbox.codec import AvroCodec
from postbox.errors import PayloadError, PostboxError, TraceContextError, UnknownEventError
from postbox.outbox import NewEvent, Outbox, trace_context
import postbox.outbox.batch as batch_module
from postbox.outbox.batch import COPY_HEADER, COPY_TRAILER, EncodedBatch
from postbox.outbox.rows import RowFactory
from postbox.outbox.table_statements import copy_statement
from postbox.pipelines import DEFAULT
from postbox.schemas import SchemaRepository

ROOT = Path(__file__).resolve().parents[2]
CODEC = AvroCodec(SchemaRepository.load(ROOT / "schemas"))
AVRO = RowFactory(CODEC)
JSON = RowFactory(encoding="json")
TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
#: The COPY's columns, in the order each row carries them (read from the statement itself).
COLUMNS = [c.strip() for c in re.search(r"outbox \(([^)]*)\)", copy_statement(DEFAULT)).group(1).split(",")]
#: The INSERT's parameters, in prepare()'s order.
PARAMS = ["id", "aggregate_type", "aggregate_id", "event_type", "payload", "traceparent"]


def cancelled(i: int, reason: Any = "r") -> dict[str, Any]:
    return {"order_id": f"o{i}", "reason": reason, "cancelled_at": T0 + timedelta(milliseconds=i)}


def placed(i: int) -> dict[str, Any]:
    return {"order_id": f"o{i}", "customer_id": "c", "total_cents": i, "placed_at": T0,
            "items": [{"sku": "s", "quantity": i % 70, "unit_price_cents": i * 1000}], "coupon": None if i % 2 else "X"}


def copy_rows(batch: EncodedBatch) -> list[dict[str, Any]]:
    """The rows of a binary COPY stream, by column name (PostgreSQL's COPY BINARY format)."""
    data = bytes(batch.data)
    assert data.startswith(COPY_HEADER) and data.endswith(COPY_TRAILER)
    pos, rows = len(COPY_HEADER), []
    while pos < len(data) - len(COPY_TRAILER):
        (count,) = struct.unpack_from(">h", data, pos)
        assert count == len(COLUMNS)
        pos += 2
        row: dict[str, Any] = {}
        for column in COLUMNS:
            (size,) = struct.unpack_from(">i", data, pos)
            pos += 4
            if size < 0:
                row[column] = None
                continue
            value = data[pos:pos + size]
            pos += size
            row[column] = uuid.UUID(bytes=value) if column == "id" else value if column == "payload" else value.decode()
        rows.append(row)
    assert pos == len(data) - len(COPY_TRAILER)
    return rows


def array_elements(data: bytes, element_oid: int) -> list[bytes | None]:
    """The elements of a one-dimensional array in PostgreSQL's binary format."""
    ndim, has_null, oid, count, lower = struct.unpack_from(">iiiii", data, 0)
    assert (ndim, oid, lower) == (1, element_oid, 1)
    pos, out = 20, []
    for _ in range(count):
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out.append(None if size < 0 else data[pos:pos + size])
        pos += max(size, 0)
    assert pos == len(data) and has_null == (None in out)
    return out


def array_rows(batch: EncodedBatch, max_rows: int) -> list[tuple[Any, ...]]:
    """The INSERT form's rows, read back from its binary arrays, chunk by chunk."""
    rows: list[tuple[Any, ...]] = []
    expected_start = 0
    for start, stop, arrays in batch.arrays(max_rows, 1 << 30):
        assert start == expected_start and 0 < stop - start <= max_rows
        expected_start = stop
        columns = [array_elements(a, oid) for a, oid in zip(arrays, (2950, 25, 25, 25, 17, 25))]
        assert {len(c) for c in columns} == {stop - start}
        for i, type_, key, event, payload, trace in zip(*columns):
            rows.append((uuid.UUID(bytes=i), type_.decode(), key.decode(), event.decode(), payload,
                         None if trace is None else trace.decode()))
    assert expected_start == len(batch)
    return rows


# -- one bad event refuses the whole batch, naming it -----------------------------------------

BAD = [
    (lambda i: NewEvent("order", f"k{i}", "OrderCancelled", cancelled(i, reason=7)), PayloadError, "reason"),
    (lambda i: NewEvent("order", "", "OrderCancelled", cancelled(i)), PayloadError, "aggregate_id"),
    (lambda i: NewEvent("order items", "k", "OrderCancelled", cancelled(i)), PayloadError, "aggregate_type"),
    (lambda i: NewEvent("order", "k", "OrderShipped", cancelled(i)), UnknownEventError, None),
    (lambda i: NewEvent("order", "k", "OrderCancelled", cancelled(i), traceparent="nope"), TraceContextError, None),
    (lambda i: NewEvent("order", "k", "OrderCancelled", cancelled(i), version=True), TypeError, None),  # type: ignore[arg-type]
    (lambda i: NewEvent("order", "k", "OrderCancelled", {**cancelled(i), "unknown": 1}), PayloadError, None),
]


@pytest.mark.parametrize("bad, error, field", BAD)
@pytest.mark.parametrize("at", [0, 37, 99])
def test_one_bad_event_refuses_the_batch_naming_its_index_and_what_is_wrong(bad: Any, error: type, field: str | None,
                                                                            at: int) -> None:
    events = [NewEvent("order", f"k{i}", "OrderCancelled", cancelled(i)) for i in range(100)]
    events[at] = bad(at)
    with pytest.raises(error) as raised:
        Outbox(codec=CODEC).plan_many(events)  # the plan is all there is before SQL: nothing was sent
    message = raised.value.message if isinstance(raised.value, PostboxError) else str(raised.value)
    assert message.startswith(f"emit_many: events[{at}] (of 100): "), message
    with pytest.raises(error) as alone:
        AVRO.prepare_event(events[at])
    one = alone.value.message if isinstance(alone.value, PostboxError) else str(alone.value)
    assert message.endswith(one)  # the error one emit of it gives, after where it is
    if field is not None:
        assert raised.value.field == field


def test_the_batch_error_keeps_its_class_fields_and_fix() -> None:
    events = [NewEvent("order", "k", "OrderCancelled", cancelled(i)) for i in range(3)]
    events[1] = replace(events[1], aggregate_id="\x00")
    with pytest.raises(PayloadError) as raised:
        AVRO.encode_batch(events)
    assert raised.value.event_type == "OrderCancelled" and raised.value.field == "aggregate_id"
    assert raised.value.fix and "events[1]" in str(raised.value)


@pytest.mark.parametrize("bad", [{"aggregate_type": "order"}, ("order", "k", "OrderCancelled", {}), None])
def test_an_element_that_is_not_a_new_event_is_refused_naming_its_index(bad: Any) -> None:
    """A dict or tuple in the list (a plausible slip) is a TypeError naming where it is and what
    to pass, not an AttributeError naming neither."""
    events: list[Any] = [NewEvent("order", "k", "OrderCancelled", cancelled(i)) for i in range(5)]
    events[3] = bad
    with pytest.raises(TypeError, match=r"^emit_many: events\[3\] \(of 5\) is a \w+, not a NewEvent") as raised:
        Outbox(codec=CODEC).plan_many(events)
    assert "NewEvent(aggregate_type, aggregate_id, event_type, payload)" in str(raised.value)


# -- the same rows as one emit per event ------------------------------------------------------

keys = st.one_of(st.from_regex(r"[a-z0-9-]{1,12}", fullmatch=True), st.text(min_size=1, max_size=6).filter(lambda s: "\x00" not in s),
                 st.integers(min_value=0, max_value=10**12), st.uuids())
traces = st.one_of(st.none(), st.just(TP), st.just(TP[:-2] + "00"))


@st.composite
def avro_events(draw: Any) -> NewEvent:
    i = draw(st.integers(0, 10**6))
    kind = draw(st.sampled_from(["cancel", "placed", "placed_v1", "payment"]))
    key, trace = draw(keys), draw(traces)
    if kind == "cancel":
        return NewEvent("order", key, "OrderCancelled", cancelled(i), traceparent=trace)
    if kind == "placed":
        return NewEvent("order", key, "OrderPlaced", placed(i), traceparent=trace)
    if kind == "placed_v1":
        payload = {k: v for k, v in placed(i).items() if k != "coupon"}
        return NewEvent("order", key, "OrderPlaced", payload, version=1, traceparent=trace)
    return NewEvent("payment", key, "PaymentFailed", {"payment_id": f"p{i}", "order_id": f"o{i}", "amount_cents": -i,
                                                      "reason": "card", "failed_at": T0 - timedelta(days=i % 20000)}, traceparent=trace)


def same_rows(factory: RowFactory, events: list[NewEvent]) -> None:
    """The batch's COPY rows, its INSERT rows and its events are one emit per event's, in order."""
    singles = [factory.prepare_event(e) for e in events]
    batch = factory.encode_batch(events)
    copied = copy_rows(batch)
    inserted = batch.rows()
    emitted = batch.events()
    assert len(copied) == len(inserted) == len(emitted) == len(events)
    for single, row, insert, event in zip(singles, copied, inserted, emitted):
        expected = dict(zip(PARAMS, single.params))
        assert {**row, "id": None} == {**expected, "id": None}
        assert insert.params[1:] == single.params[1:] and insert.params[0] == row["id"] == event.id
        assert replace(event, id=single.event.id) == single.event
    ids = [e.id for e in emitted]
    assert ids == sorted(ids) and len(set(ids)) == len(ids) and all(u.version == 7 for u in ids)
    for max_rows in (1, 7, len(events)):  # the INSERT form's arrays, in chunks: the same rows
        assert array_rows(batch, max_rows) == [r.params for r in inserted]
    # The COPY path makes the events piece by piece while it sends (pieces of 512 bytes here):
    # the same stream, the same events.
    sent = factory.encode_batch(events)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(batch_module, "COPY_PIECE", 512)
        assert b"".join(bytes(piece) for piece in sent.copy_pieces()) == bytes(sent.data)
    assert [replace(e, id=s.event.id) for e, s in zip(sent.events(), singles)] == [s.event for s in singles]
    assert [e.id for e in sent.events()] == [r["id"] for r in copy_rows(sent)]


#: Batches as runs: each drawn event repeated 1 to 30 times (runs of one kind, which the batch
#: encodes and returns as runs), at most 200 events.
avro_batches = st.lists(st.tuples(avro_events(), st.integers(1, 30)), min_size=1, max_size=12).map(
    lambda runs: [event for event, n in runs for _ in range(n)][:200])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=avro_batches)
def test_a_batch_writes_what_one_emit_per_event_writes(events: list[NewEvent]) -> None:
    same_rows(AVRO, events)
    with trace_context(TP[:-1] + "1"):  # the ambient trace context is read once, for every event without its own
        same_rows(AVRO, events)


@settings(max_examples=30, deadline=None)
@given(events=st.lists(st.builds(lambda key, n: NewEvent("legacy", key, "Happened", {"n": n, "s": str(n)}), keys, st.integers()),
                       min_size=1, max_size=40))
def test_a_json_batch_writes_what_one_emit_per_event_writes(events: list[NewEvent]) -> None:
    same_rows(JSON, events)


def test_a_key_given_as_int_or_uuid_is_its_text_and_non_ascii_text_is_marked() -> None:
    key = uuid.uuid4()
    batch = AVRO.encode_batch([NewEvent("order", key, "OrderCancelled", cancelled(1)),  # type: ignore[arg-type]
                               NewEvent("order", 42, "OrderCancelled", cancelled(2))])  # type: ignore[arg-type]
    assert [r["aggregate_id"] for r in copy_rows(batch)] == [str(key), "42"] and batch.ascii
    assert not AVRO.encode_batch([NewEvent("order", "cafe\u0301", "OrderCancelled", cancelled(1))]).ascii
