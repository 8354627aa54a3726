"""#16.1 the generator, the fit check and the builder agree, over schemas hypothesis makes up.

For any event schema (primitives, logical types, optional fields, arrays, maps, a nested record):
the class `postbox schemas codegen` writes passes the start-up fit check against it, and any
schema-valid payload, encoded as the writer does and decoded as the consumer does, builds into an
instance holding exactly the decoded values."""

from __future__ import annotations

import dataclasses
import sys
import types
import uuid
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from postbox.codec import AvroCodec
from postbox.payloads import PayloadBuilder
from postbox.payloads.codegen import generate
from postbox.payloads.fit import misfits
from postbox.schemas.repository import EventSchema, SchemaRepository

DECIMAL = {"type": "bytes", "logicalType": "decimal", "precision": 8, "scale": 2}
SCALARS: dict[str, tuple[Any, st.SearchStrategy[Any]]] = {
    "boolean": ("boolean", st.booleans()),
    "int": ("int", st.integers(-(2**31), 2**31 - 1)),
    "long": ("long", st.integers(-(2**63), 2**63 - 1)),
    "double": ("double", st.floats(allow_nan=False)),
    "string": ("string", st.text(max_size=5)),
    "bytes": ("bytes", st.binary(max_size=5)),
    "timestamp": ({"type": "long", "logicalType": "timestamp-millis"},
                  st.datetimes(min_value=datetime(1950, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(timezone.utc))),
    "date": ({"type": "int", "logicalType": "date"}, st.dates(min_value=date(1900, 1, 1), max_value=date(2200, 1, 1))),
    "decimal": (DECIMAL, st.decimals(min_value=-999999, max_value=999999, places=2, allow_nan=False, allow_infinity=False)),
    "uuid": ({"type": "string", "logicalType": "uuid"}, st.uuids().map(str)),
}


@st.composite
def field_types(draw: st.DrawFn, depth: int, where: str) -> tuple[Any, st.SearchStrategy[Any]]:
    """(an Avro field type, a strategy of its valid values)."""
    kind = draw(st.sampled_from(["scalar", "scalar", "optional", "array", "map"] + (["record"] if depth == 0 else [])))
    if kind == "record":
        fields, values = draw(record_fields(depth + 1))
        return {"type": "record", "name": f"Nested{where}", "fields": fields}, st.fixed_dictionaries(values)
    scalar, values = SCALARS[draw(st.sampled_from(sorted(SCALARS)))]
    if kind == "optional":
        return ["null", scalar], st.none() | values
    if kind == "array":
        return {"type": "array", "items": scalar}, st.lists(values, max_size=3)
    if kind == "map":
        return {"type": "map", "values": scalar}, st.dictionaries(st.text(max_size=3), values, max_size=3)
    return scalar, values


@st.composite
def record_fields(draw: st.DrawFn, depth: int = 0) -> tuple[list[dict[str, Any]], dict[str, st.SearchStrategy[Any]]]:
    count = draw(st.integers(1, 5))
    fields, values = [], {}
    for i in range(count):
        avro, strategy = draw(field_types(depth, f"F{i}"))
        fields.append({"name": f"f{i}", "type": avro})
        values[f"f{i}"] = strategy
    return fields, values


def _module(text: str) -> types.ModuleType:
    module = types.ModuleType(f"generated_{uuid.uuid4().hex}")
    sys.modules[module.__name__] = module
    exec(compile(text, f"{module.__name__}.py", "exec"), module.__dict__)
    return module


def _plain(value: Any) -> Any:
    """An instance's values as the mapping the consumer decoded (nested dataclasses → dicts)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_generated_classes_fit_their_schema_and_build_from_what_the_consumer_decodes(data: st.DataObject) -> None:
    fields, values = data.draw(record_fields())
    schema = EventSchema.from_json("thing", "Happened", 1, {"type": "record", "name": "Happened", "namespace": "t", "fields": fields})
    repository = SchemaRepository([schema])
    module = _module(generate(repository))
    cls = module.Happened
    assert misfits(cls, schema.parsed, schema.names) == []
    codec = AvroCodec(repository)
    payload = data.draw(st.fixed_dictionaries(values))
    decoded = codec.decode(codec.encode("thing", "Happened", payload)).payload
    built = PayloadBuilder(cls)(decoded)
    assert isinstance(built, cls)
    assert _plain(built) == decoded
    assert all(type(a) is type(b) for a, b in zip(_leaves(_plain(built)), _leaves(decoded)))


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for k in sorted(value, key=str) for leaf in _leaves(value[k])]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def test_decimal_and_uuid_leaves_keep_their_types() -> None:
    # A fixed example of what the property checks per leaf: Decimal stays Decimal, UUID stays UUID.
    schema = EventSchema.from_json("thing", "Happened", 1, {"type": "record", "name": "Happened", "fields": [
        {"name": "amount", "type": DECIMAL}, {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}}]})
    module = _module(generate(SchemaRepository([schema])))
    ref = uuid.uuid4()
    built = PayloadBuilder(module.Happened)({"amount": Decimal("1.50"), "ref": ref})
    assert built.amount == Decimal("1.50") and built.ref == ref
