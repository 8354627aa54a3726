"""Every incident command with a stopped broker, an unknown topic and a malformed id: one readable
error, exit 1 (expected failure) or 2 (usage error), never a traceback."""

from __future__ import annotations

import pytest

from tests.integration.incident_support import run_cli

pytestmark = pytest.mark.integration

EVENT = "01890a5d-ac96-7abc-8def-0123456789ab"
DOWN = {"POSTBOX_KAFKA_BOOTSTRAP": "127.0.0.1:1", "POSTBOX_KAFKA_TIMEOUT": "2",
        "POSTBOX_CONNECT_URL": "http://127.0.0.1:1", "POSTBOX_REDIS_URL": "redis://127.0.0.1:1/0"}


def assert_clean_failure(done, code: int, needle: str) -> None:
    assert done.returncode == code, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout
    lines = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("…")]
    assert any(needle in line for line in lines), done.stderr
    if code == 1:
        errors = [line for line in lines if line.startswith("error:")]
        assert len(errors) == 1 and len(lines) <= 3, done.stderr  # error line + fix line (+ audit notice)


@pytest.mark.parametrize("args", [
    ["topics"], ["tail", "outbox.event.x"], ["trace", EVENT, "--topic", "outbox.event.x"], ["lag"], ["lag", "g"],
    ["dlq", "list"], ["dlq", "show", EVENT], ["dlq", "replay", "--all"], ["replay", "--group", "g", "--to", "earliest"],
    ["audit"],
])
def test_stopped_broker(args: list[str]) -> None:
    env = dict(DOWN)
    if args[0] == "trace":
        env.pop("POSTBOX_REDIS_URL")  # reach the Kafka step
    assert_clean_failure(run_cli(*args, env=env), 1, "127.0.0.1:1")


@pytest.mark.parametrize("args", [["connector", "status"], ["connector", "restart", "--yes"]])
def test_stopped_connect(args: list[str]) -> None:
    assert_clean_failure(run_cli(*args, env=DOWN), 1, "unreachable")


def test_doctor_reports_each_failure_on_its_line() -> None:
    done = run_cli("doctor", env=DOWN)
    assert done.returncode == 1 and "Traceback" not in done.stderr + done.stdout
    assert "✗ kafka reachable" in done.stdout and "✗ connector" in done.stdout and "✗ redis reachable" in done.stdout
    assert "✓ wal_level" in done.stdout and "fix:" in done.stdout


@pytest.mark.parametrize("args", [
    ["tail", "outbox.event.no-such-topic-here"], ["trace", EVENT, "--topic", "outbox.event.no-such-topic-here"],
    ["dlq", "list", "--topic", "outbox.event.no-such-topic-here"], ["lag", "--topic", "outbox.event.no-such-topic-here"],
    ["replay", "--group", "no-such-group-here", "--to", "earliest", "--topic", "outbox.event.no-such-topic-here"],
])
def test_unknown_topic(args: list[str]) -> None:
    assert_clean_failure(run_cli(*args), 1, "does not exist")


def test_unknown_group() -> None:
    assert_clean_failure(run_cli("lag", "no-such-group-here"), 1, "no-such-group-here")


@pytest.mark.parametrize("args", [
    # Event ids break the one rule (postbox.ids: 1-200 printable ASCII, no spaces); "42" is an id now.
    ["trace", "not an id"], ["tail", "outbox.event.x", "--event-id", "4 2"], ["dlq", "show", "n\u00f6pe"],
    ["dlq", "list", "--event-id", "x y z"], ["dlq", "replay", "--event-id", "x" * 201], ["dlq", "replay"],
    ["tail", "outbox.event.x", "--from", "yesterday-ish"], ["replay", "--group", "g", "--to", "someday"],
    ["tail", "outbox.event.x", "--where", "no-equals-sign"], ["trace", EVENT, "--marker-ttl", "soon"],
])
def test_malformed_input_is_a_usage_error(args: list[str]) -> None:
    done = run_cli(*args)
    if "--marker-ttl" in args:
        assert_clean_failure(done, 1, "marker TTL")
    else:
        assert_clean_failure(done, 2, "Error")
