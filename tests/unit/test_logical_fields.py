"""#14.2: the codec reads top-level logical-type fields itself (codec/logical_fields.py) and must
give exactly what fastavro's own reading gives.

The consumer trusts the decoded payload as the event handlers see it: a timestamp off by a
millisecond, a timezone lost or a uuid left as text would change what every handler does. So the
property: for any value of a schema with logical types on its top-level fields, the codec's decode
equals fastavro's ``schemaless_reader`` of the same bytes with the schema as written; and a schema
with a logical type anywhere else is left to fastavro (no fast path). Shown to fail (scratch
edits): with :func:`apply` converting ``value // 1000`` the property and the project-schema test
failed at once, and with ``_has_logical`` answering False the nested case below failed.
"""

from __future__ import annotations

import io
import uuid
from datetime import date, datetime, timedelta, timezone
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from hypothesis import given, settings
from hypothesis import strategies as st

from postbox.codec import AvroCodec
from postbox.codec.avro import HEADER_LEN
from postbox.codec.logical_fields import apply, plain_reading
from postbox.schemas import SchemaRepository

LOGICAL = {
    "type": "record",
    "name": "Logical",
    "namespace": "t",
    "fields": [
        {"name": "ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "odd", "type": {"type": "long", "logicalType": "no-such-type"}, "default": 0},
        {"name": "plain", "type": ["null", "string"], "default": None},
    ],
}
# One with every logical type fastavro knows on a top-level field, but an unknown one: the fast path
# only when every logical type is one it converts.
KNOWN = {**LOGICAL, "name": "Known", "fields": [f for f in LOGICAL["fields"] if f["name"] != "odd"]}

aware = st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(timezone.utc))
values = st.fixed_dictionaries(
    {
        "ms": aware.map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000)),
        "us": aware,
        "local": st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1)).map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000)),
        "day": st.dates(min_value=date(1800, 1, 1), max_value=date(2300, 1, 1)),
        "tm": st.integers(0, 86_399_999).map(lambda ms: (datetime.min + timedelta(milliseconds=ms)).time()),
        "id": st.uuids().map(str),
        "price": st.decimals(min_value=-9_999_999, max_value=9_999_999, places=2),
        "plain": st.none() | st.text(max_size=5),
    }
)


def _bytes(schema: Any, value: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, schema, value)
    return out.getvalue()


@settings(max_examples=200, deadline=None)
@given(values)
def test_known_logical_fields_read_as_fastavro_reads_them(value: dict[str, Any]) -> None:
    schema = parse_schema(KNOWN)
    plain = plain_reading(schema)
    assert plain is not None and {name for name, _, _ in plain[1]} == {"ms", "us", "local", "day", "tm", "id", "price"}
    body = _bytes(schema, value)
    read = apply(schemaless_reader(io.BytesIO(body), plain[0], None), plain[1])
    expected = schemaless_reader(io.BytesIO(body), schema, None)
    assert read == expected
    assert [type(v) for v in read.values()] == [type(v) for v in expected.values()]
    assert read["ms"].tzinfo == expected["ms"].tzinfo and isinstance(read["id"], uuid.UUID)


def test_the_codec_reads_the_projects_schemas_like_fastavro() -> None:
    """Every schema of the repository with a logical type goes the fast path (not vacuous), and
    the codec's payload equals fastavro's own reading of the body."""
    codec = AvroCodec()
    repository = SchemaRepository.default()
    now = datetime(2026, 12, 1, 3, 4, 5, 678000, tzinfo=timezone.utc)
    fast = 0
    for schema in repository:
        if "logicalType" not in str(schema.parsed):
            continue
        assert plain_reading(schema.parsed) is not None, schema.label
        payload = _example(schema.parsed, now)
        value = codec.encode_with(schema, payload)
        decoded = codec.decode(value, reader=schema)
        assert decoded.payload == schemaless_reader(io.BytesIO(value[HEADER_LEN:]), schema.parsed, None), schema.label
        fast += 1
    assert fast >= 5


def _example(parsed: dict[str, Any], now: datetime) -> dict[str, Any]:
    samples = {"string": "x", "long": 7, "int": 3, "boolean": True, "double": 1.5}
    out: dict[str, Any] = {}
    for field in parsed["fields"]:
        kind = field["type"]
        if isinstance(kind, dict) and kind.get("logicalType") == "timestamp-millis":
            out[field["name"]] = now
        elif isinstance(kind, str) and kind in samples:
            out[field["name"]] = samples[kind]
        elif "default" in field:
            out[field["name"]] = field["default"]
        elif isinstance(kind, dict) and kind.get("type") == "array":
            out[field["name"]] = []
        else:
            out[field["name"]] = samples.get(kind if isinstance(kind, str) else "", None)
    return out


def test_logical_types_elsewhere_are_left_to_fastavro() -> None:
    nested = {
        "type": "record",
        "name": "Nested",
        "fields": [
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "when", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}], "default": None},
        ],
    }
    in_array = {
        "type": "record",
        "name": "InArray",
        "fields": [
            {"name": "days", "type": {"type": "array", "items": {"type": "int", "logicalType": "date"}}},
        ],
    }
    fixed = {
        "type": "record",
        "name": "Fixed",
        "fields": [
            {"name": "amount", "type": {"type": "fixed", "name": "Amount", "size": 8, "logicalType": "decimal", "precision": 9, "scale": 2}},
        ],
    }
    for schema in (nested, in_array, fixed, LOGICAL, {"type": "record", "name": "None", "fields": [{"name": "a", "type": "long"}]}):
        assert plain_reading(parse_schema(schema)) is None, schema["name"]
    assert plain_reading(parse_schema({"type": "long", "logicalType": "timestamp-millis"})) is None


def test_a_corrupt_timestamp_is_a_decode_error_naming_the_schema() -> None:
    """A value fastavro reads as a long but no datetime can hold: the record's DecodeError, as before."""
    codec = AvroCodec()
    schema = next(s for s in SchemaRepository.default() if "placed_at" in str(s.parsed))
    good = codec.encode_with(schema, _example(schema.parsed, datetime(2026, 1, 1, tzinfo=timezone.utc)))
    body = good[HEADER_LEN:]
    # Rewrite the body with placed_at out of datetime's range (same schema, plain long there).
    plain = plain_reading(schema.parsed)
    assert plain is not None
    read = schemaless_reader(io.BytesIO(body), plain[0], None)
    read["placed_at"] = 2**62
    bad = good[:HEADER_LEN] + _bytes(plain[0], read)
    try:
        codec.decode(bad, reader=schema)
    except Exception as exc:  # noqa: BLE001 - the class is what is asserted
        assert type(exc).__name__ == "DecodeError" and schema.label in str(exc)
    else:
        raise AssertionError("an out-of-range timestamp decoded")
