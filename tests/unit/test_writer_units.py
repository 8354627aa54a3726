"""UUIDv7 ids, traceparent capture and row preparation (no database)."""

from __future__ import annotations

import re
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest

from postbox.codec import AvroCodec
from postbox.errors import ConfigError, PayloadError, TraceContextError
from postbox.outbox import Retention, trace_context, uuid7, uuid7_datetime
from postbox.outbox.rows import INSERT_SQL, RowFactory
from postbox.outbox.uuid7 import uuid7_lower_bound
from postbox.schemas import SchemaRepository

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
ROWS = RowFactory(AvroCodec(SchemaRepository.load(Path(__file__).resolve().parents[2] / "schemas")))
CANCEL = {"order_id": "o", "reason": "r", "cancelled_at": datetime(2024, 1, 1, tzinfo=timezone.utc)}


def test_uuid7_layout_order_and_time() -> None:
    ids = [uuid7() for _ in range(20000)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(u.version == 7 and u.variant == uuid.RFC_4122 for u in ids[:100])
    now = datetime.now(timezone.utc)
    assert abs((uuid7_datetime(ids[-1]) - now).total_seconds()) < 5
    # PostgreSQL compares uuids bytewise: the bound sorts at or below every id of that instant.
    moment = datetime(2030, 1, 1, tzinfo=timezone.utc)
    bound = uuid7_lower_bound(moment)
    assert bound.bytes < uuid7(int(moment.timestamp() * 1000)).bytes
    assert uuid7(int(moment.timestamp() * 1000) - 1).bytes < bound.bytes


def test_traceparent_explicit_contextvar_and_invalid() -> None:
    assert ROWS.prepare("order", "o", "OrderCancelled", CANCEL).event.traceparent is None
    with trace_context(TP):
        assert ROWS.prepare("order", "o", "OrderCancelled", CANCEL).event.traceparent == TP
        other = TP.replace("01", "00", 1)[:-2] + "00"
        assert ROWS.prepare("order", "o", "OrderCancelled", CANCEL, traceparent=other).event.traceparent == other
    assert ROWS.prepare("order", "o", "OrderCancelled", CANCEL).event.traceparent is None
    for bad in ["", "00-" + "0" * 32 + "-00f067aa0ba902b7-01", TP.upper(), "ff" + TP[2:], TP + "-x"]:
        with pytest.raises(TraceContextError):
            ROWS.prepare("order", "o", "OrderCancelled", CANCEL, traceparent=bad or "junk")


def test_prepare_builds_one_row_and_refuses_bad_input() -> None:
    row = ROWS.prepare("order", 42, "OrderCancelled", CANCEL)
    event_id, agg, agg_id, event_type, body, trace = row.params
    assert (agg, agg_id, event_type, trace) == ("order", "42", "OrderCancelled", None)
    assert event_id == row.event.id and body[:2] == b"\xc3\x01"
    assert row.event.topic == "outbox.event.order"
    with pytest.raises(PayloadError, match="aggregate_id"):
        ROWS.prepare("order", "", "OrderCancelled", CANCEL)
    # One row per statement, never a multi-row VALUES list (dbz#1554).
    values = INSERT_SQL.split("VALUES", 1)[1]
    assert re.fullmatch(r"\s*\((%[sb], ){5}%[sb]\)\s*", values) and "COPY" not in INSERT_SQL.upper()


def test_json_encoding_and_retention_policy_parsing() -> None:
    rows = RowFactory(encoding="json")
    row = rows.prepare("legacy", "a", "Whatever", {"x": 1})
    assert row.params[4] == b'{"x":1}' and row.event.schema_version is None
    assert Retention.parse("DELETE") is Retention.DELETE
    assert Retention.parse(None) is Retention.PARTITIONS
    with pytest.raises(ConfigError, match="unknown"):
        Retention.parse("sometimes")


def test_prepare_many_is_prepare_event_of_each_in_order() -> None:
    """#17: the batch path reads the trace context once and makes ids in bulk; what it yields
    must be what one prepare_event per event yields (ids in sequence, same rows, same refusals)."""
    from postbox.outbox import NewEvent
    from postbox.outbox.uuid7 import uuid7_many

    ids = [*uuid7_many(3000), uuid7(), *uuid7_many(5)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids) and all(u.version == 7 for u in ids)
    other = TP[:-2] + "00"
    events = [NewEvent("order", f"o{i}", "OrderCancelled", CANCEL, traceparent=other if i % 3 == 0 else None) for i in range(30)]
    with trace_context(TP):
        many = ROWS.prepare_many(events)
        one_by_one = [ROWS.prepare_event(e) for e in events]
    assert [r.event.traceparent for r in many] == [r.event.traceparent for r in one_by_one] == [
        other if i % 3 == 0 else TP for i in range(30)]
    assert [r.params[1:] for r in many] == [r.params[1:] for r in one_by_one]
    assert [r.event.id for r in many] == sorted(r.event.id for r in many) < [r.event.id for r in one_by_one]
    bad = [*events[:5], NewEvent("order", "o", "OrderCancelled", {**CANCEL, "reason": 7})]
    with pytest.raises(PayloadError, match="reason"):
        ROWS.prepare_many(bad)
