"""#16.1 `postbox schemas codegen`: the payload classes written from schemas/ — deterministic, one
module, stdlib dataclasses that pass the start-up check against their schemas — and the staleness
check of the reference shop's generated module (consumers/shop/payloads.py)."""

from __future__ import annotations

import json
import shutil
import sys
import types
import uuid
from pathlib import Path
from typing import Any

from postbox.payloads.codegen import generate
from postbox.payloads.fit import misfits
from postbox.schemas.repository import SchemaRepository
from tests.support.cli import invoke

ROOT = Path(__file__).resolve().parents[2]
SHOP_MODULE = ROOT / "consumers" / "shop" / "payloads.py"


def _module(text: str) -> types.ModuleType:
    """The generated text as an imported module (registered: dataclasses and get_type_hints look
    the annotations up in it)."""
    module = types.ModuleType(f"generated_payloads_{uuid.uuid4().hex}")
    sys.modules[module.__name__] = module
    exec(compile(text, f"{module.__name__}.py", "exec"), module.__dict__)  # our own generated code
    return module


def test_the_shops_generated_payload_module_is_not_stale() -> None:
    expected = generate(SchemaRepository.load(ROOT / "schemas"))
    assert SHOP_MODULE.read_text(encoding="utf-8") == expected, (
        "consumers/shop/payloads.py is stale: run `postbox schemas codegen --out consumers/shop/payloads.py`")


def test_every_generated_class_fits_its_schema(tmp_path: Path) -> None:
    repository = SchemaRepository.load(ROOT / "schemas")
    module = _module(generate(repository))
    for schema in repository:
        latest = repository.get(schema.aggregate_type, schema.event_type)
        assert misfits(getattr(module, schema.event_type), latest.parsed, latest.names) == []


def test_output_depends_on_the_schemas_only_not_on_where_they_are(tmp_path: Path) -> None:
    copy = tmp_path / "elsewhere" / "schemas"
    shutil.copytree(ROOT / "schemas", copy)
    text = generate(SchemaRepository.load(copy))
    assert text == generate(SchemaRepository.load(ROOT / "schemas"))
    assert str(tmp_path) not in text and str(ROOT) not in text


def _write(folder: Path, aggregate: str, event: str, fields: list[dict[str, Any]], version: int = 1) -> None:
    (folder / aggregate).mkdir(parents=True, exist_ok=True)
    raw = {"type": "record", "name": event, "namespace": f"t.{aggregate}", "fields": fields}
    (folder / aggregate / f"{event}.v{version}.avsc").write_text(json.dumps(raw))


def test_clashing_names_logical_types_and_containers(tmp_path: Path) -> None:
    folder = tmp_path / "schemas"
    line_a = {"type": "record", "name": "Line", "fields": [{"name": "sku", "type": "string"}]}
    line_b = {"type": "record", "name": "Line", "fields": [{"name": "hours", "type": "double"}]}
    _write(folder, "order", "Refunded", [{"name": "lines", "type": {"type": "array", "items": line_a}},
                                        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}}])
    _write(folder, "payment", "Refunded", [{"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 8, "scale": 2}},
                                          {"name": "on", "type": {"type": "int", "logicalType": "date"}},
                                          {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
                                          {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["FULL", "PART"]}},
                                          {"name": "tags", "type": {"type": "map", "values": ["null", "long"]}},
                                          {"name": "note", "type": ["null", "string"], "default": None}])
    _write(folder, "work", "Logged", [{"name": "lines", "type": {"type": "array", "items": line_b}}])
    repository = SchemaRepository.load(folder)
    text = generate(repository)
    module = _module(text)
    assert {"OrderRefunded", "PaymentRefunded", "RefundedLine", "LoggedLine"} <= set(module.__all__)
    assert all(f"\n{line}\n" in text for line in ("from datetime import date", "from datetime import datetime", "from decimal import Decimal", "from uuid import UUID"))
    assert "from datetime import time" not in text  # only what the annotations use
    for aggregate, cls in (("order", "OrderRefunded"), ("payment", "PaymentRefunded"), ("work", "Logged")):
        schema = next(s for s in repository if s.aggregate_type == aggregate)
        assert misfits(getattr(module, cls), schema.parsed, schema.names) == []
    assert module.PaymentRefunded.__dataclass_fields__["note"].default is None


def test_codegen_command_writes_and_check_fails_when_stale(tmp_path: Path) -> None:
    out = tmp_path / "payloads.py"
    code, _ = invoke("schemas", "codegen", "--dir", str(ROOT / "schemas"), "--out", str(out))
    assert code == 0 and out.read_text() == SHOP_MODULE.read_text()
    assert invoke("schemas", "codegen", "--dir", str(ROOT / "schemas"), "--out", str(out), "--check")[0] == 0
    out.write_text(out.read_text().replace("order_id: str", "order_id: int", 1))
    code, output = invoke("schemas", "codegen", "--dir", str(ROOT / "schemas"), "--out", str(out), "--check")
    assert code == 1 and "is stale" in output
