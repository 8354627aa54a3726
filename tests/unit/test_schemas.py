"""The schema repository, fingerprints and the compatibility check (no services)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastavro.schema import fingerprint as fastavro_fingerprint
from typer.testing import CliRunner

from postbox.errors import SchemaError, UnknownEventError
from fastavro import parse_schema

from postbox.schemas import SchemaRepository, check_folder, fingerprint
from postbox.schemas.fingerprint import fingerprint_of_canonical

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def write(folder: Path, rel: str, schema: dict) -> None:
    path = folder / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(schema))


def record(name: str, *fields: dict) -> dict:
    return {"type": "record", "name": name, "namespace": "t", "fields": list(fields)}


def test_fingerprint_matches_the_spec_and_fastavro() -> None:
    # Avro's reference value for the schema "int" (little-endian bytes, as Java and fastavro print).
    assert fingerprint_of_canonical('"int"').hex() == "8f5c393f1ad57572"
    repo = SchemaRepository.load(SCHEMAS)
    for schema in repo:
        assert schema.fingerprint_hex == fastavro_fingerprint(schema.canonical, "CRC-64-AVRO")


# The Avro project's own vectors (share/test/data/schema-tests.txt): a schema and its CRC-64-AVRO
# fingerprint as Java's signed long. Single-object encoding writes that long little-endian.
AVRO_SPEC_VECTORS = [
    ('"null"', 7195948357588979594),
    ('"int"', 8247732601305521295),
    ('"string"', -8142146995180207161),
    ('["int", {"type": "boolean"}]', 5392556393470105090),
    ('{"fields": [], "type": "record", "name": "foo", "namespace": "x.y"}', 5916914534497305771),
    ('{"namespace": "x.y.z", "type": "enum", "name": "foo", "doc": "foo bar", "symbols": ["A1", "A2"]}', -4448647247586288245),
    ('{"type": "array", "items": {"type": "null"}}', -589620603366471059),
    ('{"name": "PigValue", "type": "record", "fields": [{"name": "value", "type": ["null", "int", "long", "PigValue"]}]}',
     -1759257747318642341),
]


@pytest.mark.parametrize(("schema", "expected"), AVRO_SPEC_VECTORS)
def test_fingerprint_bytes_are_the_avro_spec_vectors_little_endian(schema: str, expected: int) -> None:
    assert fingerprint(parse_schema(json.loads(schema))) == expected.to_bytes(8, "little", signed=True)


def test_repository_indexes_the_reference_shop() -> None:
    repo = SchemaRepository.load(SCHEMAS)
    assert ("order", "OrderPlaced") in repo.events()
    assert [s.version for s in repo.versions("order", "OrderPlaced")] == [1, 2]
    assert repo.get("order", "OrderPlaced").version == 2
    v1 = repo.get("order", "OrderPlaced", 1)
    assert repo.by_fingerprint(v1.fingerprint) is v1
    for agg, event in [("order", "OrderCancelled"), ("payment", "PaymentCaptured"), ("payment", "PaymentFailed")]:
        assert repo.get(agg, event).version == 1


def test_unknown_event_and_version_say_what_exists() -> None:
    repo = SchemaRepository.load(SCHEMAS)
    with pytest.raises(UnknownEventError, match="OrderShipped.*known event types of order: OrderCancelled, OrderPlaced"):
        repo.get("order", "OrderShipped")
    with pytest.raises(UnknownEventError, match="belongs to aggregate type"):
        repo.get("payment", "OrderPlaced")
    with pytest.raises(UnknownEventError, match="no version 7 .known: v1, v2"):
        repo.get("order", "OrderPlaced", 7)


def test_misnamed_and_broken_files_are_named(tmp_path: Path) -> None:
    write(tmp_path, "a/Good.v1.avsc", record("Good", {"name": "x", "type": "string"}))
    write(tmp_path, "a/Wrong.v1.avsc", record("Other", {"name": "x", "type": "string"}))
    write(tmp_path, "a/Bad.v1.avsc", record("Bad", {"name": "x", "type": "strng"}))
    (tmp_path / "a" / "Junk.avsc").write_text("{}")
    with pytest.raises(SchemaError) as info:
        SchemaRepository.load(tmp_path)
    text = str(info.value)
    assert "Wrong.v1.avsc: the record is named 'Other'" in text
    assert "Bad.v1.avsc: not a valid Avro schema" in text
    assert "Junk.avsc: name it <EventType>.v<N>.avsc" in text


def test_reference_schemas_are_compatible() -> None:
    report = check_folder(SCHEMAS)
    assert report.ok, report.problems
    assert [(p.event, p.older, p.newer) for p in report.pairs] == [("order/OrderPlaced", 1, 2)]


def test_new_required_field_breaks_backward_and_type_change_breaks_both(tmp_path: Path) -> None:
    base = {"name": "id", "type": "string"}
    write(tmp_path, "a/E.v1.avsc", record("E", base, {"name": "n", "type": "int"}))
    write(tmp_path, "a/E.v2.avsc", record("E", base, {"name": "n", "type": "int"}, {"name": "added", "type": "string"}))
    write(tmp_path, "a/F.v1.avsc", record("F", base, {"name": "n", "type": "long"}))
    write(tmp_path, "a/F.v2.avsc", record("F", base, {"name": "n", "type": "string"}))
    report = check_folder(tmp_path)
    assert not report.ok
    pairs = {p.event: p for p in report.pairs}
    assert pairs["a/E"].backward and "'added'" in pairs["a/E"].backward[0]
    assert not pairs["a/E"].forward  # the old reader skips the new field
    assert pairs["a/F"].backward and pairs["a/F"].forward
    assert "field 'n'" in pairs["a/F"].backward[0]


def test_defaulted_field_promotion_and_union_widening_are_compatible(tmp_path: Path) -> None:
    write(tmp_path, "a/E.v1.avsc", record("E", {"name": "n", "type": "int"}, {"name": "s", "type": "string"}))
    write(
        tmp_path,
        "a/E.v2.avsc",
        record("E", {"name": "n", "type": "int"}, {"name": "s", "type": ["null", "string"], "default": None},
               {"name": "extra", "type": "long", "default": 0}),
    )
    report = check_folder(tmp_path)
    # v1 reads v2's s only when it is a string: a null written by v2 cannot be read by v1.
    assert not report.ok
    assert any("forward" in line and "'s'" in line for line in report.problems)
    assert not report.pairs[0].backward


def test_cli_check_fails_on_an_incompatible_folder_and_passes_on_schemas(tmp_path: Path) -> None:
    import typer

    from postbox.cli import schemas_cmds

    app = typer.Typer()
    schemas_cmds.register(app)
    runner = CliRunner()
    ok = runner.invoke(app, ["schemas", "check", "--dir", str(SCHEMAS)])
    assert ok.exit_code == 0, ok.output
    assert "all compatible" in ok.output

    write(tmp_path, "a/E.v1.avsc", record("E", {"name": "n", "type": "long"}))
    write(tmp_path, "a/E.v2.avsc", record("E", {"name": "n", "type": "string"}))
    bad = runner.invoke(app, ["schemas", "check", "--dir", str(tmp_path)])
    assert bad.exit_code == 1
    assert "INCOMPATIBLE" in bad.output
    as_json = runner.invoke(app, ["schemas", "check", "--dir", str(tmp_path), "--json"])
    assert as_json.exit_code == 1
    data = json.loads(as_json.output)
    assert data["ok"] is False and data["pairs"][0]["backward"]

    listing = runner.invoke(app, ["schemas", "list", "--dir", str(SCHEMAS), "--json"])
    rows = json.loads(listing.output)
    assert {(r["event_type"], r["version"]) for r in rows} >= {("OrderPlaced", 1), ("OrderPlaced", 2)}
