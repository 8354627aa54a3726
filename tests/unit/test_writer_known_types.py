"""The writer's fast path for an event type it has emitted before (#17) gives exactly the row or
the error of the full path: same payload bytes, schema version, key, trace context, same
PayloadError naming the same field, for any key and any payload (no database)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import copy
import dataclasses
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from postbox.codec import AvroCodec
from postbox.errors import PayloadError
from postbox.outbox import trace_context
from postbox.outbox.rows import EmittedEvent, PreparedRow, RowFactory
from postbox.schemas import SchemaRepository

CODEC = AvroCodec(SchemaRepository.load(Path(__file__).resolve().parents[2] / "schemas"))
TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
ORDER: dict[str, Any] = {
    "order_id": "o-1", "customer_id": "c-1",
    "items": [{"sku": "tea", "quantity": 2, "unit_price_cents": 450}],
    "total_cents": 900, "placed_at": datetime(2024, 1, 1, tzinfo=timezone.utc), "currency": "EUR", "coupon": None,
}


class FullPathOnly(RowFactory):
    """The factory as it was before the fast path: every emit takes the full checks."""

    def _remember(self, aggregate_type: str, event_type: str) -> None:
        return None


def warmed() -> RowFactory:
    rows = RowFactory(CODEC)
    rows.prepare("order", "o-0", "OrderPlaced", ORDER)
    rows.prepare("order", "o-0", "OrderCancelled", {"order_id": "o", "reason": "r", "cancelled_at": 0})
    assert ("order", "OrderPlaced") in rows._known  # the next emits take the fast path
    return rows


def outcome(rows: RowFactory, *args: Any) -> tuple[Any, ...]:
    """What ``prepare`` gives, without the (always new) event id: the row's other fields, or the error."""
    try:
        row: PreparedRow = rows.prepare(*args)
    except Exception as exc:  # noqa: BLE001 - compared between the two paths
        return ("raised", type(exc), str(exc), getattr(exc, "field", None))
    ev = row.event
    assert row.params[0] == ev.id and ev.id.version == 7
    return ("row", row.params[1:], (ev.aggregate_type, ev.aggregate_id, ev.event_type, ev.schema_version, ev.traceparent))


keys = st.one_of(
    st.text(max_size=20), st.text(alphabet=st.characters(codec="ascii"), min_size=4090, max_size=4100),
    st.sampled_from(["", "\x00", "o\x00", "\ud800", "é" * 1025, "ü" * 2048, "ü" * 2049, "o-1"]),
    st.integers(), st.none(),
)
values = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70), st.floats(),
                   st.text(max_size=5), st.sampled_from(["\ud800", "x" * 70]), st.binary(max_size=3),
                   st.just([]), st.just({}), st.just(datetime(2024, 1, 1)), st.just(datetime(2024, 1, 1, tzinfo=timezone.utc)))


@st.composite
def payloads(draw: st.DrawFn) -> Any:
    payload: dict[str, Any] = {**ORDER, "items": [dict(i) for i in ORDER["items"]]}
    for _ in range(draw(st.integers(0, 3))):
        where = draw(st.sampled_from(["field", "item", "drop", "extra"]))
        if where == "field":
            payload[draw(st.sampled_from(sorted(ORDER)))] = draw(values)
        elif where == "item" and isinstance(payload.get("items"), list) and payload["items"]:
            payload["items"][0][draw(st.sampled_from(["sku", "quantity", "unit_price_cents", "colour"]))] = draw(values)
        elif where == "drop":
            payload.pop(draw(st.sampled_from(sorted(ORDER))), None)
        else:
            payload[draw(st.sampled_from(["colour", "total"]))] = draw(values)
    return payload


@settings(max_examples=400, deadline=None)
@given(key=keys, payload=payloads(), event_type=st.sampled_from(["OrderPlaced", "OrderCancelled", "Unknown"]),
       traced=st.booleans())
def test_known_type_gives_what_the_full_path_gives(key: Any, payload: dict[str, Any], event_type: str, traced: bool) -> None:
    fast, full = warmed(), FullPathOnly(CODEC)
    with trace_context(TP if traced else None):
        assert outcome(fast, "order", key, event_type, payload) == outcome(full, "order", key, event_type, payload)


def test_a_bad_payload_of_a_known_type_still_names_its_field() -> None:
    rows = warmed()
    with pytest.raises(PayloadError) as caught:
        rows.prepare("order", "o-1", "OrderPlaced", {**ORDER, "items": [{"sku": "tea", "quantity": "two", "unit_price_cents": 1}]})
    assert "items[0].quantity" in str(caught.value) and "'two'" in str(caught.value)
    with pytest.raises(PayloadError, match="aggregate_id"):
        rows.prepare("order", "", "OrderPlaced", ORDER)


def test_options_and_other_versions_take_the_full_path() -> None:
    rows = warmed()
    v1 = {k: v for k, v in ORDER.items() if k not in ("currency", "coupon")}
    assert rows.prepare("order", "o", "OrderPlaced", v1, version=1).event.schema_version == 1
    assert rows.prepare("order", "o", "OrderPlaced", ORDER).event.schema_version == 2
    assert rows.prepare("order", "o", "OrderPlaced", ORDER, traceparent=TP).event.traceparent == TP
    with pytest.raises(TypeError, match="versoin"):
        rows.prepare("order", "o", "OrderPlaced", ORDER, versoin=2)  # type: ignore[call-arg]


def test_the_emitted_event_is_the_dataclass_its_init_would_make() -> None:
    event = warmed().prepare("order", "o-1", "OrderPlaced", ORDER).event
    twin = EmittedEvent(event.id, "order", "o-1", "OrderPlaced", 2, None)
    assert event == twin and hash(event) == hash(twin) and repr(event) == repr(twin)
    assert dataclasses.asdict(event) == dataclasses.asdict(twin) and event.topic == twin.topic == "outbox.event.order"
    assert pickle.loads(pickle.dumps(event)) == twin and copy.copy(event) == twin
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.aggregate_id = "o-2"  # type: ignore[misc]
