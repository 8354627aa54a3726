"""Avro single-object encoding, schema evolution on decode, validation errors, JSON codec."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from postbox.codec import MARKER, AvroCodec, EventHeaders, JsonCodec, decode_record
from postbox.errors import DecodeError, PayloadError, UnknownEventError
from postbox.schemas import SchemaRepository

REPO = SchemaRepository.load(Path(__file__).resolve().parents[2] / "schemas")
CODEC = AvroCodec(REPO)
PLACED_AT = datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=timezone.utc)


def order_v1(**overrides: object) -> dict:
    payload = {
        "order_id": "o-1",
        "customer_id": "c-9",
        "items": [{"sku": "tea", "quantity": 2, "unit_price_cents": 450}],
        "total_cents": 900,
        "placed_at": PLACED_AT,
    }
    payload.update(overrides)
    return payload


def test_single_object_layout() -> None:
    data = CODEC.encode("order", "OrderPlaced", order_v1(), version=1)
    assert data[:2] == MARKER == b"\xc3\x01"
    assert data[2:10] == REPO.get("order", "OrderPlaced", 1).fingerprint


def test_v1_bytes_read_as_v2_fill_defaults_and_v2_bytes_read_as_v1() -> None:
    v1_bytes = CODEC.encode("order", "OrderPlaced", order_v1(), version=1)
    as_v2 = CODEC.decode(v1_bytes)  # latest = v2
    assert as_v2.writer_version == 1 and as_v2.reader_version == 2
    assert as_v2.payload == {**order_v1(), "currency": "EUR", "coupon": None}

    v2_bytes = CODEC.encode("order", "OrderPlaced", order_v1(currency="USD", coupon="SPRING"))
    as_v1 = CODEC.decode(v2_bytes, reader_version=1)
    assert as_v1.payload == order_v1()
    assert CODEC.decode(v2_bytes).payload["coupon"] == "SPRING"


@pytest.mark.parametrize(
    ("payload", "field", "fragment"),
    [
        ({k: v for k, v in order_v1().items() if k != "customer_id"}, "customer_id", "is missing"),
        (order_v1(total_cents="900"), "total_cents", "expected long, got str"),
        (order_v1(items=[{"sku": "tea", "quantity": 2.5, "unit_price_cents": 1}]), "items[0].quantity", "expected int"),
        (order_v1(quantity=3), "quantity", "is not a field of the schema"),
        (order_v1(coupon=7), "coupon", "expected one of null | string"),
        (order_v1(total_cents=2**70), "total_cents", "out of range"),
        (order_v1(placed_at=datetime(2024, 1, 1)), "placed_at", "timezone-aware"),
    ],
)
def test_invalid_payloads_name_event_field_and_value(payload: dict, field: str, fragment: str) -> None:
    with pytest.raises(PayloadError) as info:
        CODEC.encode("order", "OrderPlaced", payload)
    err = info.value
    assert err.event_type == "OrderPlaced"
    assert err.field == field
    assert fragment in err.message
    assert "order/OrderPlaced v2" in err.message and repr(field) in err.message


def test_unknown_event_type_is_refused() -> None:
    with pytest.raises(UnknownEventError):
        CODEC.encode("order", "OrderShipped", {})


def test_decode_errors_are_clear() -> None:
    good = CODEC.encode("order", "OrderCancelled", {"order_id": "o", "reason": "r", "cancelled_at": PLACED_AT})
    with pytest.raises(DecodeError, match="fingerprint 0000000000000000"):
        CODEC.decode(MARKER + bytes(8) + good[10:])
    with pytest.raises(DecodeError, match="not Avro single-object"):
        CODEC.decode(b"\xc3")
    with pytest.raises(DecodeError, match="trailing bytes"):
        CODEC.decode(good + b"\x00")
    with pytest.raises(DecodeError, match="cannot be read"):
        CODEC.decode(good[:-3])
    with pytest.raises(DecodeError, match="header says event type 'OrderPlaced'"):
        CODEC.decode(good, event_type="OrderPlaced")


def test_decode_record_picks_the_codec_from_the_bytes() -> None:
    avro = CODEC.encode("payment", "PaymentFailed", {
        "payment_id": "p", "order_id": "o", "amount_cents": 5, "reason": "declined", "failed_at": PLACED_AT,
    })
    decoded = decode_record(avro, [("event_type", b"PaymentFailed"), ("id", b"x")], repository=REPO)
    assert decoded.encoding == "avro" and decoded.payload["retryable"] is False

    stock = json.dumps({"orderId": 7, "note": "héllo"}).encode()
    decoded = decode_record(stock, {"event_type": b'"OrderCreated"', "aggregate_type": b"order"}, repository=REPO)
    assert decoded.encoding == "json" and decoded.payload == {"orderId": 7, "note": "héllo"}
    assert decoded.event_type == "OrderCreated"
    # A JSON document carried as a JSON string (text column + JsonConverter) is accepted too.
    twice = json.dumps(json.dumps({"a": 1})).encode()
    assert decode_record(twice, None, repository=REPO).payload == {"a": 1}
    with pytest.raises(DecodeError, match="not JSON"):
        decode_record(b"{nope", [("event_type", b"X")], repository=REPO)
    with pytest.raises(DecodeError, match="expected an object"):
        decode_record(b"[1]", None, repository=REPO)
    with pytest.raises(DecodeError, match="tombstone"):
        decode_record(None, None, repository=REPO)


def test_headers_accept_plain_and_json_strings() -> None:
    headers = EventHeaders.parse([("id", b"0190-x"), ("event_type", b'"OrderPlaced"'), ("traceparent", None)])
    assert headers.event_id == "0190-x" and headers.event_type == "OrderPlaced" and headers.traceparent is None


def test_json_codec_round_trip() -> None:
    codec = JsonCodec()
    assert codec.decode(codec.encode({"a": [1, "ü"]})).payload == {"a": [1, "ü"]}


@settings(max_examples=200, deadline=None)
@given(
    order_id=st.text(max_size=40),
    quantity=st.integers(-(2**31), 2**31 - 1),
    total=st.integers(-(2**63), 2**63 - 1),
    coupon=st.none() | st.text(max_size=10),
    millis=st.integers(0, 4102444800000),
)
def test_round_trip_property(order_id: str, quantity: int, total: int, coupon: str | None, millis: int) -> None:
    placed = datetime.fromtimestamp(millis / 1000, tz=timezone.utc)
    payload = order_v1(order_id=order_id, total_cents=total, coupon=coupon, currency="GBP", placed_at=placed,
                       items=[{"sku": order_id, "quantity": quantity, "unit_price_cents": total}])
    assert CODEC.decode(CODEC.encode("order", "OrderPlaced", payload)).payload == payload


@pytest.mark.parametrize("compiled", [True, False], ids=["fastavro-read-data", "schemaless-reader"])
def test_both_read_paths_give_the_same_payloads_and_errors(compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The codec reads through fastavro's compiled ``_read_data`` with the named-type tables built
    once, or, where a fastavro lacks it, through ``schemaless_reader``: the same payload (as
    written, and resolved from v1 into v2), and the same DecodeError for truncated bytes and for
    trailing ones, either way."""
    import postbox.codec.avro as avro

    if not compiled:
        monkeypatch.setattr(avro, "_read_data", None)
    codec = AvroCodec()
    placed = {"order_id": "o-1", "customer_id": "c-1", "total_cents": 250, "placed_at": datetime(2026, 1, 2, tzinfo=timezone.utc),
              "items": [{"sku": "s", "quantity": 2, "unit_price_cents": 125}], "currency": "EUR", "coupon": None}  # fmt: skip
    value = codec.encode("order", "OrderPlaced", placed)
    payload, reading = codec.read(value)
    assert (reading.named is not None) is compiled
    assert payload == placed
    with pytest.raises(DecodeError, match=r"cannot be read as order/OrderPlaced v2: EOFError"):
        codec.read(value[:-3])
    with pytest.raises(DecodeError, match="has 2 trailing bytes"):
        codec.read(value + b"\x00\x00")
    v1 = codec.encode("order", "OrderPlaced", {k: v for k, v in placed.items() if k not in ("currency", "coupon")}, version=1)
    resolved, reading = codec.read(v1)  # v1 bytes into v2: defaults fill currency and coupon
    assert reading.resolve_into is not None and (reading.named is not None) is compiled
    assert resolved == placed
    with pytest.raises(DecodeError, match=r"order/OrderPlaced v1 payload \(\d+ bytes\) cannot be read as order/OrderPlaced v2: "):
        codec.read(v1[:-3])
