"""The replication slot holds events while Connect is away: nothing inserted meanwhile is lost.

These tests stop or kill shared services, so they run after every other test (marker
`disruptive`) and leave the stack up again.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from postbox.stack.stack import LocalStack
from tests.support.kafka import read_until
from tests.support.outbox_rows import insert_event

pytestmark = [pytest.mark.integration, pytest.mark.disruptive]


def _postbox(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from postbox.cli import main; main()", *args],
        capture_output=True, text=True, timeout=timeout,
    )


def _quiet(_message: str) -> None:
    pass


def test_killed_connect_worker_loses_no_event(settings, pg_conn, unique):
    stack = LocalStack()
    aggregate_type = f"killconnect{unique}"
    with pg_conn.transaction():
        before = insert_event(pg_conn, aggregate_type, "a-1", "BeforeKill", b"0")
    read_until(settings.kafka_bootstrap, f"outbox.event.{aggregate_type}", lambda rs: len(rs) >= 1)

    assert stack.connect.kill()  # SIGKILL: no offset flush, no clean slot release
    during = []
    for i in range(50):
        with pg_conn.transaction():
            during.append(insert_event(pg_conn, aggregate_type, f"a-{i % 5}", "WhileDown", str(i).encode()))
    stack.up(_quiet)

    wanted = {before, *during}
    records = read_until(
        settings.kafka_bootstrap, f"outbox.event.{aggregate_type}",
        lambda rs: wanted <= {r.event_id for r in rs}, timeout=120,
    )
    assert wanted <= {r.event_id for r in records}, f"lost {len(wanted - {r.event_id for r in records})} events"
    # At-least-once may repeat an event; it never invents one.
    assert {r.event_id for r in records} <= wanted
    # Per-aggregate order survives the crash: first occurrences keep insertion order per key.
    for key in {f"a-{i}" for i in range(5)}:
        emitted = [e for i, e in enumerate(during) if f"a-{i % 5}" == key]
        seen: list[str] = []
        for record in records:
            if record.key == key.encode() and record.event_id in emitted and record.event_id not in seen:
                seen.append(record.event_id)
        assert seen == emitted


def test_down_then_up_delivers_events_inserted_while_connect_was_down(settings, unique):
    import psycopg

    aggregate_type = f"downup{unique}"
    down = _postbox("down")
    assert down.returncode == 0, down.stderr

    # Only PostgreSQL comes back: the application keeps writing while the pipeline is down.
    stack = LocalStack()
    stack.postgres.start()
    with psycopg.connect(settings.database_url) as conn:
        held = [insert_event(conn, aggregate_type, "a-1", "WhileDown", str(i).encode()) for i in range(20)]
        conn.commit()

    up = _postbox("up", "--json")
    assert up.returncode == 0, up.stderr
    report = json.loads(up.stdout)
    assert report["status"]["connector"]["state"] == "RUNNING"

    records = read_until(settings.kafka_bootstrap, f"outbox.event.{aggregate_type}", lambda rs: set(held) <= {r.event_id for r in rs})
    first_seen = list(dict.fromkeys(r.event_id for r in records))
    assert first_seen == held  # all of them, in commit order


def test_second_up_changes_nothing_and_status_is_complete():
    first = _postbox("up", "--json")
    assert first.returncode == 0, first.stderr
    second = _postbox("up", "--json")
    assert second.returncode == 0, second.stderr
    report = json.loads(second.stdout)
    assert report["changed"] is False, report["steps"]
    assert {s["outcome"] for s in report["steps"]} <= {"up to date", "already running", "unchanged"}

    status = _postbox("status", "--json")
    assert status.returncode == 0, status.stdout + status.stderr
    data = json.loads(status.stdout)
    for component in ("postgres", "redis", "kafka", "connect"):
        assert data[component]["state"] == "running"
        assert data[component]["address"].startswith("127.0.0.1:")
    assert data["connector"]["state"] == "RUNNING"
    assert data["task"]["state"] == "RUNNING"
    assert isinstance(data["slot"]["lag_bytes"], int)
