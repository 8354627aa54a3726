"""#16.1 dates and decimals arrive as the same Python types whether the payload was Avro or JSON.

A hypothesis property over schema-valid payloads: the Avro path (the writer's single-object
encoding, read back by the consumer's codec) and the JSON path (a stock Debezium outbox's JSON, in
each spelling JSON producers use, read by the consumer's JSON codec and held to the schema) give
equal values of identical types. On the main this was written against, the JSON path left
``timestamp-millis`` as an int, ``date`` as an int and decimals as text, so the property failed
on its first example.
"""

from __future__ import annotations

import json
import uuid
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from postbox.codec import AvroCodec, JsonCodec
from postbox.codec.json_conform import conform
from postbox.codec.validate import Invalid
from postbox.schemas.repository import EventSchema, SchemaRepository

RAW = {
    "type": "record", "name": "Invoiced", "namespace": "test.billing",
    "fields": [
        {"name": "issued_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "settled_at", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}], "default": None},
        {"name": "due", "type": {"type": "int", "logicalType": "date"}},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "tax", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 3}], "default": None},
        {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
    ],
}
SCHEMA = EventSchema.from_json("billing", "Invoiced", 1, RAW)
CODEC = AvroCodec(SchemaRepository([SCHEMA]))
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

offsets = st.sampled_from([timezone.utc, timezone(timedelta(hours=2)), timezone(timedelta(hours=-7, minutes=-30))])
instants = st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=offsets)
dates = st.dates(min_value=date(1900, 1, 1), max_value=date(2200, 1, 1))


def decimals(precision: int, scale: int) -> st.SearchStrategy[Decimal]:
    bound = 10 ** (precision - scale) - 1
    return st.decimals(min_value=-bound, max_value=bound, places=scale, allow_nan=False, allow_infinity=False)


payloads = st.fixed_dictionaries({
    "issued_at": instants,
    "settled_at": st.none() | instants,
    "due": dates,
    "amount": decimals(9, 2),
    "tax": st.none() | decimals(6, 3),
    "ref": st.uuids().map(str),
})


def _instant_spelling(value: datetime, unit: timedelta, how: str) -> Any:
    if how == "epoch":
        return (value - EPOCH) // unit
    return value.isoformat().replace("+00:00", "Z") if how == "iso-z" else value.isoformat()


def _decimal_spelling(value: Decimal, how: str) -> Any:
    return float(value) if how == "number" else str(value)


def json_spelling(payload: dict[str, Any], how: dict[str, str]) -> bytes:
    """The payload as a JSON producer would write it, in the spellings ``how`` picks."""
    doc = {
        "issued_at": _instant_spelling(payload["issued_at"], timedelta(milliseconds=1), how["instant"]),
        "settled_at": None if payload["settled_at"] is None else _instant_spelling(payload["settled_at"], timedelta(microseconds=1), how["instant"]),
        "due": (payload["due"] - date(1970, 1, 1)).days if how["date"] == "days" else payload["due"].isoformat(),
        "amount": _decimal_spelling(payload["amount"], how["decimal"]),
        "tax": None if payload["tax"] is None else _decimal_spelling(payload["tax"], how["decimal"]),
        "ref": payload["ref"],
    }
    return json.dumps(doc).encode()


spellings = st.fixed_dictionaries({
    "instant": st.sampled_from(["epoch", "iso", "iso-z"]),
    "date": st.sampled_from(["days", "iso"]),
    "decimal": st.sampled_from(["text", "number"]),
})


def _typed(payload: dict[str, Any]) -> dict[str, tuple[type, Any]]:
    return {k: (type(v), v) for k, v in payload.items()}


@given(payloads, spellings)
def test_avro_and_json_payloads_arrive_as_the_same_python_values_and_types(payload: dict[str, Any], how: dict[str, str]) -> None:
    via_avro = CODEC.decode(CODEC.encode("billing", "Invoiced", payload)).payload
    via_json = conform(SCHEMA, JsonCodec().decode(json_spelling(payload, how)).payload)
    assert _typed(via_json) == _typed(via_avro)
    assert type(via_avro["issued_at"]) is datetime and via_avro["issued_at"].tzinfo == timezone.utc
    assert type(via_avro["due"]) is date and type(via_avro["amount"]) is Decimal and type(via_avro["ref"]) is uuid.UUID
    assert str(via_json["amount"]) == str(via_avro["amount"])  # the schema's scale, digit for digit


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("issued_at", "2026-01-02T03:04:05", "needs an offset or Z"),
        ("issued_at", "yesterday", "is not a timestamp-millis"),
        ("due", "2026-02-30", "is not a date"),
        ("amount", "12.345", "has more than 2 decimal places"),
        ("amount", 12345678.5, "has more than 9 digits"),
        ("amount", "twelve", "is not a decimal"),
        ("amount", True, "expected a number or decimal text"),
        ("ref", "not-a-uuid", "is not a uuid"),
    ],
)
def test_a_json_value_no_spelling_reads_is_refused_naming_the_field(field: str, value: Any, words: str) -> None:
    doc: dict[str, Any] = {"issued_at": 0, "due": 0, "amount": "1.00", "ref": str(uuid.uuid4())}
    doc[field] = value
    with pytest.raises(Invalid) as caught:
        conform(SCHEMA, doc)
    assert caught.value.path == field and words in caught.value.problem
