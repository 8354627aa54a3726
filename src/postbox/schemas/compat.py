"""Schema compatibility: can each version of an event read the previous one's data, and back?

Two checks per pair of consecutive versions, in both directions:

* a structural check following the Avro specification's schema-resolution rules (field matched by
  name or alias, else a reader default; promotions int→long→float→double and string↔bytes; enum
  symbols; union branches), which names the exact field that breaks; and
* a round trip: a sample datum of the writer schema is encoded and then decoded with the reader
  schema by fastavro itself, so the verdict never rests on this module's reading of the spec alone.

*Backward* means the new version reads old data (consumers upgrade first); *forward* means the old
version reads new data (producers upgrade first). postbox needs both, because producers and
consumers deploy independently.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer

from postbox.schemas.repository import EventSchema, scan

PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
#: writer type -> reader types that can read it (Avro spec, "Schema Resolution").
PROMOTIONS = {
    "int": {"int", "long", "float", "double"},
    "long": {"long", "float", "double"},
    "float": {"float", "double"},
    "string": {"string", "bytes"},
    "bytes": {"bytes", "string"},
}


@dataclass
class PairResult:
    """The verdict on one pair of consecutive versions."""

    event: str
    older: int
    newer: int
    backward: list[str] = field(default_factory=list)  # problems when newer reads older's data
    forward: list[str] = field(default_factory=list)  # problems when older reads newer's data

    @property
    def ok(self) -> bool:
        return not self.backward and not self.forward

    def as_dict(self) -> dict[str, Any]:
        return {
            "event": self.event,
            "older": self.older,
            "newer": self.newer,
            "backward": self.backward,
            "forward": self.forward,
            "ok": self.ok,
        }


@dataclass
class CompatibilityReport:
    """Everything `postbox schemas check` found in one folder."""

    directory: str
    schemas: list[EventSchema]
    parse_problems: list[str]
    pairs: list[PairResult]

    @property
    def problems(self) -> list[str]:
        lines = list(self.parse_problems)
        for pair in self.pairs:
            for p in pair.backward:
                lines.append(f"{pair.event}: v{pair.newer} cannot read v{pair.older} data (backward): {p}")
            for p in pair.forward:
                lines.append(f"{pair.event}: v{pair.older} cannot read v{pair.newer} data (forward): {p}")
        return lines

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {
            "directory": self.directory,
            "ok": self.ok,
            "schemas": len(self.schemas),
            "pairs": [p.as_dict() for p in self.pairs],
            "problems": self.problems,
        }


def check_folder(directory: Path | str) -> CompatibilityReport:
    """Parse every schema under ``directory`` and check each event's consecutive versions."""
    result = scan(Path(directory))
    problems = list(result.problems)
    by_event: dict[tuple[str, str], list[EventSchema]] = {}
    for schema in result.schemas:
        by_event.setdefault((schema.aggregate_type, schema.event_type), []).append(schema)
    pairs: list[PairResult] = []
    for (aggregate, event), versions in sorted(by_event.items()):
        versions.sort(key=lambda s: s.version)
        numbers = [s.version for s in versions]
        expected = list(range(1, len(versions) + 1))
        if numbers != expected:
            problems.append(
                f"{aggregate}/{event}: versions {', '.join(f'v{n}' for n in numbers)} are not v1..v{len(numbers)} without gaps"
            )
        for older, newer in zip(versions, versions[1:]):
            pairs.append(check_pair(older, newer))
    return CompatibilityReport(str(directory), result.schemas, problems, pairs)


def check_pair(older: EventSchema, newer: EventSchema) -> PairResult:
    """Check that ``newer`` reads ``older``'s data and ``older`` reads ``newer``'s."""
    result = PairResult(f"{older.aggregate_type}/{older.event_type}", older.version, newer.version)
    result.backward = reader_problems(reader=newer.raw, writer=older.raw)
    result.forward = reader_problems(reader=older.raw, writer=newer.raw)
    return result


def reader_problems(reader: Any, writer: Any) -> list[str]:
    """Why data written with ``writer`` cannot be read with ``reader`` (empty: it can)."""
    r_names: dict[str, Any] = {}
    w_names: dict[str, Any] = {}
    r_parsed = parse_schema(reader, named_schemas=r_names)
    w_parsed = parse_schema(writer, named_schemas=w_names)
    problems = _Resolver(r_names, w_names).check(r_parsed, w_parsed, "")
    if not problems:
        problems = _round_trip(r_parsed, w_parsed, w_names)
    return problems


class _Resolver:
    """The Avro schema-resolution rules, reporting the path of each mismatch."""

    def __init__(self, r_names: dict[str, Any], w_names: dict[str, Any]) -> None:
        self.r_names = r_names
        self.w_names = w_names
        self.seen: set[tuple[str, str]] = set()

    def _resolve(self, schema: Any, names: dict[str, Any]) -> Any:
        if isinstance(schema, str) and schema not in PRIMITIVES:
            return names[schema]
        return schema

    def check(self, reader: Any, writer: Any, path: str) -> list[str]:
        reader = self._resolve(reader, self.r_names)
        writer = self._resolve(writer, self.w_names)
        if isinstance(writer, list):  # every branch the writer may have used must be readable
            problems: list[str] = []
            for branch in writer:
                problems += self.check(reader, branch, path)
            return problems
        if isinstance(reader, list):
            for branch in reader:
                if not self.check(branch, writer, path):
                    return []
            return [f"{_where(path)}: the reader's union {_describe(reader)} has no branch for the writer's {_describe(writer)}"]
        r_type, w_type = _kind(reader), _kind(writer)
        if w_type in PRIMITIVES or r_type in PRIMITIVES:
            return _primitive_problems(reader, writer, r_type, w_type, path)
        if r_type != w_type:
            return [f"{_where(path)}: the writer's {w_type} cannot be read as {r_type}"]
        if r_type == "record":
            return self._record(reader, writer, path)
        if r_type == "array":
            return self.check(reader["items"], writer["items"], f"{path}[]")
        if r_type == "map":
            return self.check(reader["values"], writer["values"], f"{path}{{}}")
        return _named_problems(reader, writer, r_type, path)

    def _record(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> list[str]:
        if not _same_name(reader, writer):
            return [f"{_where(path)}: record {writer['name']} cannot be read as record {reader['name']}"]
        key = (reader["name"], writer["name"])
        if key in self.seen:  # recursive types: assume the pair is fine while checking it
            return []
        self.seen.add(key)
        writer_fields = {f["name"]: f for f in writer["fields"]}
        problems: list[str] = []
        for r_field in reader["fields"]:
            field_path = f"{path}.{r_field['name']}" if path else r_field["name"]
            candidates = [r_field["name"], *r_field.get("aliases", [])]
            w_field = next((writer_fields[n] for n in candidates if n in writer_fields), None)
            if w_field is None:
                if "default" not in r_field:
                    problems.append(
                        f"field {field_path!r} is missing from the writer's data and the reader declares no default"
                    )
                continue
            problems += self.check(r_field["type"], w_field["type"], field_path)
        return problems


def _kind(schema: Any) -> str:
    return schema if isinstance(schema, str) else str(schema["type"])


def _same_name(reader: dict[str, Any], writer: dict[str, Any]) -> bool:
    aliases = {_short(a) for a in reader.get("aliases", [])}
    return _short(reader["name"]) == _short(writer["name"]) or _short(writer["name"]) in aliases


def _short(name: str) -> str:
    """The unqualified name: unqualified names match, as in the spec."""
    return name.rsplit(".", 1)[-1]

def _primitive_problems(reader: Any, writer: Any, r_type: str, w_type: str, path: str) -> list[str]:
    """A primitive on either side: the writer's type must promote to the reader's, and two declared
    logical types must agree (one side without a logical type reads as its underlying type)."""
    if r_type not in PROMOTIONS.get(w_type, {w_type}):
        return [f"{_where(path)}: the writer's {w_type} cannot be read as {r_type}"]
    r_logical = reader.get("logicalType") if isinstance(reader, dict) else None
    w_logical = writer.get("logicalType") if isinstance(writer, dict) else None
    if r_logical != w_logical and r_logical and w_logical:
        return [f"{_where(path)}: logical type {w_logical} cannot be read as {r_logical}"]
    return []


def _named_problems(reader: dict[str, Any], writer: dict[str, Any], r_type: str, path: str) -> list[str]:
    """Enum and fixed: same name; an enum reader knows every writer symbol or has a default; a
    fixed has the same size."""
    if r_type == "enum":
        if not _same_name(reader, writer):
            return [f"{_where(path)}: enum {writer['name']} cannot be read as enum {reader['name']}"]
        missing = [s for s in writer["symbols"] if s not in reader["symbols"]]
        if missing and "default" not in reader:
            return [f"{_where(path)}: the reader's enum {reader['name']} lacks symbol(s) {', '.join(missing)} and has no default"]
        return []
    if r_type == "fixed":
        if not _same_name(reader, writer) or reader["size"] != writer["size"]:
            return [f"{_where(path)}: fixed {writer['name']}[{writer['size']}] cannot be read as {reader['name']}[{reader['size']}]"]
        return []
    return [f"{_where(path)}: unsupported schema type {r_type}"]  # pragma: no cover



def _where(path: str) -> str:
    return f"field {path!r}" if path else "the record"


def _describe(schema: Any) -> str:
    if isinstance(schema, list):
        return "[" + ", ".join(_describe(b) for b in schema) + "]"
    if isinstance(schema, dict):
        return str(schema.get("name") or schema["type"])
    return str(schema)


def _round_trip(reader: Any, writer: Any, w_names: dict[str, Any]) -> list[str]:
    """Encode sample data with the writer schema and decode it with the reader schema."""
    problems: list[str] = []
    for variant in (0, 1):
        datum = sample(writer, w_names, variant)
        buf = io.BytesIO()
        try:
            schemaless_writer(buf, writer, datum)
            buf.seek(0)
            schemaless_reader(buf, writer, reader)
        except Exception as exc:  # fastavro's resolution errors are varied: report them all
            problems.append(f"fastavro could not resolve sample data: {type(exc).__name__}: {exc}")
            break
    return problems


def sample(schema: Any, names: dict[str, Any], variant: int = 0) -> Any:
    """A datum valid for ``schema`` (variant 0: first union branches; 1: last, non-empty collections)."""
    if isinstance(schema, str) and schema not in PRIMITIVES:
        schema = names[schema]
    if isinstance(schema, list):
        return sample(schema[-1 if variant else 0], names, variant)
    kind = _kind(schema)
    logical = _logical_sample(schema.get("logicalType") if isinstance(schema, dict) else None)
    if logical is not _NOT_LOGICAL:
        return logical
    return _sample_of_kind(kind, schema, names, variant)


#: What :func:`_logical_sample` returns for a type whose logical type (if any) has no sample of its own.
_NOT_LOGICAL = object()
_TIMESTAMPS = ("timestamp-millis", "timestamp-micros", "local-timestamp-millis", "local-timestamp-micros")


def _logical_sample(logical: Any) -> Any:
    """A sample of a logical type fastavro encodes from a Python type of its own (a datetime, a
    Decimal, a UUID string), or _NOT_LOGICAL: the underlying type's sample then serves."""
    if logical in _TIMESTAMPS:
        return datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone.utc) if logical.startswith("timestamp") else datetime(2024, 1, 2)
    if logical == "date":
        return datetime(2024, 1, 2).date()
    if logical == "decimal":
        return Decimal(1)
    if logical == "uuid":
        return "00000000-0000-7000-8000-000000000000"
    return _NOT_LOGICAL


def _sample_of_kind(kind: str, schema: Any, names: dict[str, Any], variant: int) -> Any:
    """The sample of a named or primitive Avro type: ``sample``'s own recursion for the types
    that hold others (record, array, map), a fixed value for the rest."""
    if kind == "record":
        return {f["name"]: sample(f["type"], names, variant) for f in schema["fields"]}
    if kind == "enum":
        return schema["symbols"][-1 if variant else 0]
    if kind == "array":
        return [sample(schema["items"], names, variant)] * (2 if variant else 0)
    if kind == "map":
        return {"k": sample(schema["values"], names, variant)} if variant else {}
    if kind == "fixed":
        return b"\x00" * schema["size"]
    return {
        "null": None,
        "boolean": True,
        "int": 1,
        "long": 1,
        "float": 1.0,
        "double": 1.0,
        "bytes": b"x",
        "string": "x",
    }[kind]
