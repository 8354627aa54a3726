"""#17: the compiled writer (check + Avro encoding in one pass) says "written" only when it may.

The codec trusts it to skip both ``validate`` and fastavro: if it wrote a payload ``validate``
refuses, a bad event would reach Kafka; if its bytes differed from fastavro's, consumers would
read another value. So the property: for any schema node and any value, whenever the writer says
written, ``validate`` accepts the value and fastavro encodes it to exactly the same bytes. And it
must not be vacuous: the payloads of the project's schemas are written by it, not passed on.
Shown to fail (scratch edits): with the record writer ignoring unknown keys the union property
found a counterexample, with the int writer ignoring its range the first property did, and with the
union writer accepting tuples the explicit case below failed.
"""

from __future__ import annotations

import io
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from fastavro import parse_schema, schemaless_writer
from hypothesis import given, settings
from hypothesis import strategies as st

import tests.unit.test_compiled_check as check_tests
from postbox.codec import AvroCodec
from postbox.codec.compiled_writer import compile_writer
from postbox.codec.validate import Invalid, validate
from postbox.schemas import SchemaRepository

ROOT = Path(__file__).resolve().parents[2]

# The unions and defaults the writer handles itself.
UNIONS = {
    "type": "record", "name": "Unions", "namespace": "t",
    "fields": [
        {"name": "ns", "type": ["null", "string"], "default": None},
        {"name": "sn", "type": ["string", "null"], "default": "x"},
        {"name": "nl", "type": ["null", "long"]},
        {"name": "nd", "type": ["null", "double"], "default": None},
        {"name": "na", "type": ["null", {"type": "array", "items": "int"}], "default": None},
        {"name": "nr", "type": ["null", {"type": "record", "name": "Inner", "fields": [
            {"name": "x", "type": "int", "default": 3}, {"name": "f", "type": "float", "default": 1}]}], "default": None},
        {"name": "m", "type": {"type": "map", "values": ["null", "boolean"]}, "default": {}},
        {"name": "tu", "type": {"type": "long", "logicalType": "timestamp-micros"}, "default": 0},
    ],
}
UNION_NAMES: dict[str, Any] = {}
UNION_SCHEMA = parse_schema(UNIONS, named_schemas=UNION_NAMES)
UNION_FIELDS = [f["name"] for f in UNIONS["fields"]] + ["x", "f", "extra"]
union_values = st.recursive(
    check_tests.scalars | st.tuples(st.text(max_size=2), st.integers()),
    lambda inner: st.lists(inner, max_size=3) | st.lists(inner, max_size=3).map(tuple)
    | st.dictionaries(st.sampled_from(UNION_FIELDS) | st.text(max_size=2), inner, max_size=5),
    max_leaves=12,
)


def _assert_written_only_when_it_may(schema: Any, names: dict[str, Any], datum: Any) -> bool:
    """If the writer says written, validate accepts the value and (for a whole record, which
    fastavro encodes on its own) fastavro writes the same bytes. Returns whether it was written."""
    out = bytearray()
    try:
        written = compile_writer(schema, names)(datum, out)
    except Exception:  # noqa: BLE001 - the codec takes the general path on any exception
        return False
    if written:
        try:
            validate(schema, names, datum)
        except Invalid as exc:
            raise AssertionError(f"written, but validate refuses it: {exc.path} {exc.problem}") from None
        if isinstance(schema, dict) and schema.get("type") == "record":
            buf = io.BytesIO()
            schemaless_writer(buf, schema, datum)
            assert bytes(out) == buf.getvalue(), datum
    return written


@settings(max_examples=400, deadline=None)
@given(datum=check_tests.values)
def test_written_means_valid_and_fastavros_bytes_on_any_value(datum: Any) -> None:
    _assert_written_only_when_it_may(check_tests.SCHEMA, check_tests.NAMES, datum)
    for field in check_tests.SCHEMA["fields"]:
        _assert_written_only_when_it_may(field["type"], check_tests.NAMES, datum)


@settings(max_examples=400, deadline=None)
@given(field=st.sampled_from(check_tests.FIELDS), value=check_tests.values, nested=st.booleans())
def test_written_means_valid_and_fastavros_bytes_with_one_field_changed(field: str, value: Any, nested: bool) -> None:
    changed = check_tests._valid_everything(**{field: value})
    datum = check_tests._valid_everything(next=changed) if nested else changed
    _assert_written_only_when_it_may(check_tests.SCHEMA, check_tests.NAMES, datum)


@settings(max_examples=500, deadline=None)
@given(datum=st.dictionaries(st.sampled_from(UNION_FIELDS), union_values, max_size=10))
def test_unions_and_defaults(datum: Any) -> None:
    _assert_written_only_when_it_may(UNION_SCHEMA, UNION_NAMES, datum)
    for field in UNION_SCHEMA["fields"]:
        if field["name"] in datum:
            _assert_written_only_when_it_may(field["type"], UNION_NAMES, datum[field["name"]])


# Records whose fields are all required (the writer checks their keys by count, not by set), one
# of them also referred to by name (written by a function of its own).
REQUIRED = {
    "type": "record", "name": "Required", "namespace": "t",
    "fields": [
        {"name": "s", "type": "string"},
        {"name": "items", "type": {"type": "array", "items": {"type": "record", "name": "Item", "fields": [
            {"name": "sku", "type": "string"}, {"name": "q", "type": "long"}]}}},
        {"name": "again", "type": ["null", "Item"]},
    ],
}
REQUIRED_NAMES: dict[str, Any] = {}
REQUIRED_SCHEMA = parse_schema(REQUIRED, named_schemas=REQUIRED_NAMES)
REQUIRED_FIELDS = ["s", "items", "again", "sku", "q", "extra"]
required_values = st.recursive(
    st.none() | st.text(max_size=2) | st.integers(-3, 3) | st.booleans(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(REQUIRED_FIELDS), inner, max_size=4),
    max_leaves=10,
)


@settings(max_examples=500, deadline=None)
@given(datum=st.dictionaries(st.sampled_from(REQUIRED_FIELDS), required_values, max_size=5), item=st.booleans())
def test_records_of_required_fields_only(datum: Any, item: bool) -> None:
    """A missing field, or a key the record does not have, is never written (extra keys included)."""
    if item:
        datum = {"s": "x", "items": [datum], "again": None}
    _assert_written_only_when_it_may(REQUIRED_SCHEMA, REQUIRED_NAMES, datum)
    _assert_written_only_when_it_may(REQUIRED_SCHEMA, REQUIRED_NAMES, {"s": "x", "items": [], "again": datum})


def test_deeply_nested_schemas_compile_and_write_what_fastavro_writes() -> None:
    """The writer's source nests a node inside its parent; past a depth a node gets a function of
    its own, so no schema is too deep for Python's parser (100 indents, 20 nested loops)."""
    arrays: Any = "int"
    datum: Any = 7
    for _ in range(40):
        arrays, datum = {"type": "array", "items": arrays}, [datum, datum] if not isinstance(datum, list) else [datum]
    records: Any = {"type": "record", "name": "R0", "fields": [{"name": "leaf", "type": ["null", "string"], "default": None}]}
    nested: Any = {"leaf": "x"}
    for level in range(1, 40):
        records = {"type": "record", "name": f"R{level}", "fields": [{"name": "inner", "type": records}, {"name": "list", "type": arrays}]}
        nested = {"inner": nested, "list": datum}
    names: dict[str, Any] = {}
    schema = parse_schema(records, named_schemas=names)
    assert _assert_written_only_when_it_may(schema, names, nested)


def test_the_projects_payloads_are_written_by_it() -> None:
    """Not vacuous: real payloads, with and without their optional fields, take the one-pass path."""
    repo = SchemaRepository.load(ROOT / "schemas")
    placed = {"order_id": "o-1", "customer_id": "c-1", "total_cents": 1800,
              "items": [{"sku": "tea", "quantity": 2, "unit_price_cents": 450}] * 2,
              "placed_at": datetime(2024, 1, 1, 12, 30, 0, 123456, tzinfo=timezone.utc)}
    v2 = repo.get("order", "OrderPlaced", 2)
    for payload in (placed, {**placed, "currency": "USD", "coupon": "SPRING"}, {**placed, "items": []}):
        assert _assert_written_only_when_it_may(v2.parsed, v2.names, payload), payload
    assert _assert_written_only_when_it_may(UNION_SCHEMA, UNION_NAMES, {"nl": None})  # every other field: its default
    assert _assert_written_only_when_it_may(UNION_SCHEMA, UNION_NAMES, {"nl": 5, "nr": {"f": 2.5}, "m": {"k": True}})
    # fastavro reads a tuple in a union as (branch name, value): never written here
    assert not _assert_written_only_when_it_may(UNION_SCHEMA, UNION_NAMES, {"nl": None, "na": (1, 2)})
    passed_on = parse_schema({"type": "record", "name": "P", "fields": [
        {"name": "ls", "type": ["long", "string"], "default": 1},    # a union of two types
        {"name": "by", "type": "bytes", "default": "\u00ff"}]})      # a default Avro spells as JSON text
    assert not _assert_written_only_when_it_may(passed_on, {}, {"ls": 1, "by": b""})
    assert not _assert_written_only_when_it_may(passed_on, {}, {"ls": 1})
    # And the codec's bytes are the same either way.
    codec = AvroCodec(repo)
    assert codec.encode("order", "OrderPlaced", placed) == codec.encode_general(v2, placed)
