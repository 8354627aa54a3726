"""Every Redis the project ships or starts checks RESTORE payloads (``sanitize-dump-payload yes``):
a malformed or crafted DUMP payload is refused instead of being loaded into memory as is (Redis's
default, ``no``, trusts every payload a client sends). The undo's RESTORE of its own DUMPs passes
the check (tests/integration/test_effects_undo_sanitized.py)."""

from __future__ import annotations

from pathlib import Path

import yaml

from postbox.testing.server import DEFAULT_CONFIG

ROOT = Path(__file__).resolve().parents[2]


def test_the_local_stacks_config_sanitizes_restore_payloads() -> None:
    lines = (ROOT / "infra" / "local" / "redis.conf").read_text().splitlines()
    assert "sanitize-dump-payload yes" in lines


def test_docker_compose_sanitizes_restore_payloads() -> None:
    compose = yaml.safe_load((ROOT / "infra" / "docker-compose.yml").read_text())
    command = compose["services"]["redis"]["command"]
    assert command[command.index("--sanitize-dump-payload") + 1] == "yes"


def test_private_test_servers_sanitize_restore_payloads() -> None:
    assert DEFAULT_CONFIG["sanitize-dump-payload"] == "yes"
