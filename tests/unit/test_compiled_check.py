"""#17: the compiled payload check accepts exactly what ``validate`` accepts.

The writer trusts the compiled check to skip ``validate`` (the walk that names a misfit): if the
two ever disagreed, a payload ``validate`` refuses could be encoded and written. So the property:
for any schema node kind and any value, compiled check passes <=> validate raises nothing.
"""

from __future__ import annotations

import uuid
from datetime import date, datetime, time, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from fastavro import parse_schema
from hypothesis import given, settings
from hypothesis import strategies as st

from postbox.codec import AvroCodec
from postbox.codec.compiled_check import compile_check
from postbox.codec.validate import Invalid, validate
from postbox.errors import PayloadError
from postbox.schemas import SchemaRepository

ROOT = Path(__file__).resolve().parents[2]

# Every node kind validate knows, including a recursive named type and every logical type.
EVERYTHING = {
    "type": "record", "name": "Everything", "namespace": "t",
    "fields": [
        {"name": "n", "type": "null"}, {"name": "b", "type": "boolean"},
        {"name": "i", "type": "int"}, {"name": "l", "type": "long"},
        {"name": "f", "type": "float"}, {"name": "d", "type": "double"},
        {"name": "by", "type": "bytes"}, {"name": "s", "type": "string"},
        {"name": "e", "type": {"type": "enum", "name": "Colour", "symbols": ["RED", "GREEN"]}},
        {"name": "fx", "type": {"type": "fixed", "name": "Four", "size": 4}},
        {"name": "a", "type": {"type": "array", "items": "int"}},
        {"name": "m", "type": {"type": "map", "values": "string"}},
        {"name": "u", "type": ["null", "string", "Colour"]},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "lts", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "dt", "type": {"type": "int", "logicalType": "date"}},
        {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "next", "type": ["null", "Everything"], "default": None},
        {"name": "opt", "type": "int", "default": 0},
    ],
}
FIELDS = [f["name"] for f in EVERYTHING["fields"]] + ["unknown_field"]
NAMES: dict[str, Any] = {}
SCHEMA = parse_schema(EVERYTHING, named_schemas=NAMES)


def _verdicts(schema: Any, names: dict[str, Any], datum: Any) -> tuple[bool, bool]:
    try:
        validate(schema, names, datum)
        slow = True
    except Invalid:
        slow = False
    return compile_check(schema, names)(datum), slow


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**64), 2**64), st.floats(allow_nan=False),
    st.sampled_from([2**31 - 1, 2**31, -(2**31) - 1, 2**63 - 1, 2**63, -(2**63) - 1]),
    st.binary(max_size=6), st.text(max_size=6), st.sampled_from(["RED", "GREEN", "BLUE"]),
    st.just(str(uuid.UUID(int=7))), st.just("not-a-uuid"), st.just(uuid.UUID(int=9)),
    st.just(datetime(2024, 1, 1, tzinfo=timezone.utc)), st.just(datetime(2024, 1, 1)),
    st.just(date(2024, 1, 1)), st.just(time(12, 0)),
    st.sampled_from([Decimal("1.5"), Decimal("1.505"), Decimal("7")]),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=3), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(datum=values)
def test_compiled_check_agrees_with_validate_on_any_value(datum: Any) -> None:
    schema, names = SCHEMA, NAMES
    # The whole record, and each field's own type on its own (where the recursion is reached).
    fast, slow = _verdicts(schema, names, datum)
    assert fast == slow, datum
    for field in schema["fields"]:
        fast, slow = _verdicts(field["type"], names, datum)
        assert fast == slow, (field["name"], datum)


def _valid_everything(**overrides: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "n": None, "b": True, "i": 1, "l": 2, "f": 1.5, "d": 2.5, "by": b"x", "s": "s", "e": "RED",
        "fx": b"abcd", "a": [1, 2], "m": {"k": "v"}, "u": "GREEN", "ts": datetime(2024, 1, 1, tzinfo=timezone.utc),
        "lts": 5, "dt": date(2024, 1, 2), "tm": time(1, 2), "dec": Decimal("1.25"), "id": uuid.UUID(int=3),
    }
    record.update(overrides)
    return record


@settings(max_examples=400, deadline=None)
@given(field=st.sampled_from(FIELDS), value=values, nested=st.booleans())
def test_compiled_check_agrees_on_one_field_changed(field: str, value: Any, nested: bool) -> None:
    """Valid records with one field replaced by anything (also inside the recursive ``next``)."""
    schema, names = SCHEMA, NAMES
    changed = _valid_everything(**{field: value})
    datum = _valid_everything(next=changed) if nested else changed
    fast, slow = _verdicts(schema, names, datum)
    assert fast == slow, datum


def test_a_refused_payload_still_names_the_field_and_value() -> None:
    """The compiled check only says no; the error the user reads comes from validate, as before."""
    codec = AvroCodec(SchemaRepository.load(ROOT / "schemas"))
    payload = {
        "order_id": "o-1", "customer_id": "c-1", "items": [{"sku": "tea", "quantity": "two", "unit_price_cents": 450}],
        "total_cents": 900, "placed_at": datetime(2024, 1, 1, tzinfo=timezone.utc), "currency": "EUR", "coupon": None,
    }
    with pytest.raises(PayloadError) as info:
        codec.encode("order", "OrderPlaced", payload)
    assert "items[0].quantity" in str(info.value) and "'two'" in str(info.value)
