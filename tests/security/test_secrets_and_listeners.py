"""Secrets stay in the state folder's secrets file, and every service listens on loopback only."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from postbox.stack.stack import LocalStack

# disruptive (runs alone, after the tests that share the stack): `postbox up` on the running stack rewrites its services' configuration and re-applies the connector.
pytestmark = [pytest.mark.integration, pytest.mark.disruptive]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def stack() -> LocalStack:
    return LocalStack(locate_tools=False)


def _postbox(*args: str) -> str:
    result = subprocess.run([sys.executable, "-c", "from postbox.cli import main; main()", *args], capture_output=True, text=True, timeout=120)
    return result.stdout + result.stderr


def test_no_secret_appears_in_configs_logs_or_status(stack):
    secrets = {k: v for k, v in stack.secrets().items() if k.endswith("PASSWORD")}
    assert secrets, "postbox up generates the role passwords"
    places: dict[str, str] = {
        "postbox status --json": _postbox("status", "--json"),
        "postbox status": _postbox("status"),
        "postbox up --json": _postbox("up", "--json"),
    }
    for path in [*ROOT.glob("connectors/*.json"), ROOT / "infra" / "docker-compose.yml", *ROOT.glob("infra/local/*")]:
        places[str(path.relative_to(ROOT))] = path.read_text()
    for log in [*stack.layout.logs.glob("*.log"), stack.layout.pg_log]:
        places[str(log)] = log.read_text(errors="replace")
    for run_file in stack.layout.run.glob("*"):
        if run_file.is_file():
            places[str(run_file)] = run_file.read_text(errors="replace")

    leaks = [f"{name} in {where}" for where, text in places.items() for name, value in secrets.items() if value in text]
    assert not leaks, leaks


def test_secrets_file_is_private(stack):
    assert stack.layout.secrets_file.stat().st_mode & 0o077 == 0


def _listening_addresses(port: int) -> set[str]:
    out = subprocess.run(["ss", "-H", "-ltn", f"sport = :{port}"], capture_output=True, text=True, check=True).stdout
    return {line.split()[3].rsplit(":", 1)[0] for line in out.splitlines() if line.strip()}


def test_every_service_listens_on_loopback_only(stack):
    ports = {
        "postgres": stack.ports.postgres,
        "redis": stack.ports.redis,
        "kafka": stack.ports.kafka,
        "kafka controller": stack.ports.controller,
        "connect": stack.ports.connect,
    }
    loopback = {"127.0.0.1", "[::1]", "[::ffff:127.0.0.1]"}
    for name, port in ports.items():
        addresses = _listening_addresses(port)
        assert addresses, f"{name} is not listening on {port}"
        assert addresses <= loopback, f"{name} listens on {addresses}"
