"""Every compose file under infra/ is valid against the Compose Specification's JSON schema (a
pinned copy of compose-spec's schema/compose-spec.json, tests/support/compose-spec.json, taken
at compose-spec commit 170098ba07d9f53c383a41bfd4c5166b0a4529a6): docker compose cannot run
here, and our own consistency test (test_compose_consistency.py) checks only what we thought of.
An override file is checked alone and merged with the base file, as docker compose runs it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft7Validator

from tests.support import compose_files

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "tests" / "support" / "compose-spec.json").read_text())
COMPOSE_FILES = sorted(p for p in (ROOT / "infra").rglob("*.y*ml") if "services" in compose_files.plain(p))
BASE = ROOT / "infra" / "docker-compose.yml"
REPLICAS = ROOT / "infra" / "docker-compose.replicas.yml"


def _errors(document: object) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}" for e in Draft7Validator(SCHEMA).iter_errors(document)]


def test_the_pinned_schema_is_a_valid_draft_7_schema():
    Draft7Validator.check_schema(SCHEMA)


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=[str(p.relative_to(ROOT)) for p in COMPOSE_FILES])
def test_a_compose_file_follows_the_compose_specification(path):
    assert _errors(compose_files.plain(path)) == []


def test_the_replicated_topology_merged_with_the_base_file_follows_the_specification():
    assert REPLICAS in COMPOSE_FILES
    merged = compose_files.merged(BASE, REPLICAS)
    assert _errors(merged) == []
    services = merged["services"]
    # An override service with neither image nor build would run nothing: each has one after the merge.
    assert all("image" in service for service in services.values()), [n for n, s in services.items() if "image" not in s]
    # A container in another's network namespace cannot publish ports of its own (the engine refuses).
    for name, service in services.items():
        if str(service.get("network_mode", "")).startswith("service:"):
            assert not service.get("ports"), f"{name} joins {service['network_mode']} and publishes {service['ports']}"
            assert service["network_mode"].removeprefix("service:") in services, name


def test_the_validation_catches_what_compose_would_refuse():
    compose = yaml.safe_load((ROOT / "infra" / "docker-compose.yml").read_text())
    name, service = next(iter(compose["services"].items()))
    service["restart_policy"] = "always"  # a misplaced key (it belongs under deploy:)
    service["depends_on"] = 42  # neither a list nor a mapping of services
    errors = _errors(compose)
    assert any("restart_policy" in e for e in errors) and any(e.startswith(f"services/{name}/depends_on") for e in errors), errors
