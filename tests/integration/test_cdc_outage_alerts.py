"""#15.1 "Commands that work on the stack they describe": during a CDC outage (Kafka Connect down,
events piling up in the replication slot while every group's Kafka lag is 0) `postbox lag
--max-lag N` — the documented cron alert — trips and says which check did, and `postbox status
--json` exits 1 like `postbox status`. Shown to fail before the fix: `lag --max-lag 0` exited 0
and `status --json` exited 0 with Connect stopped.

Stops the stack's Connect worker (marker `disruptive`: runs after the others) and brings it back.
"""

from __future__ import annotations

import json
import time

import pytest

from postbox.stack.stack import LocalStack
from tests.integration.incident_support import run_cli
from tests.support.consumers import commit_offset
from tests.support.kafka import read_until
from tests.support.outbox_rows import insert_event

pytestmark = [pytest.mark.integration, pytest.mark.disruptive]


def lag_alert(group: str, *extra: str) -> tuple[int, dict]:
    done = run_cli("lag", group, "--max-lag", "0", "--json", *extra)
    return done.returncode, json.loads(done.stdout)


def test_lag_max_lag_and_status_json_trip_while_connect_is_down(settings, pg_conn, unique):
    aggregate_type, group = f"outage{unique}", f"outage-{unique}"
    topic = f"outbox.event.{aggregate_type}"
    with pg_conn.transaction():
        first = insert_event(pg_conn, aggregate_type, "a-1", "Before", b"{}")
    read_until(settings.kafka_bootstrap, topic, lambda rs: any(r.event_id == first for r in rs))
    commit_offset(settings.kafka_bootstrap, group, topic, 1)  # the group is caught up: lag 0

    code, healthy = lag_alert(group, "--max-slot-lag", str(2**40))
    assert code == 0 and healthy["alerts"] == [], healthy
    status = run_cli("status", "--json")
    assert status.returncode == 0 and json.loads(status.stdout)["healthy"] is True, status.stdout[-2000:]

    stack = LocalStack(locate_tools=False)
    assert stack.connect.stop()
    try:
        with pg_conn.transaction():  # waits in the slot: nothing streams it to Kafka
            second = insert_event(pg_conn, aggregate_type, "a-1", "WhileDown", b"{}")
        code, outage = lag_alert(group)
        assert [g["lag"] for g in outage["groups"]] == [0], outage["groups"]  # Kafka sees nothing wrong
        assert code == 1, outage
        alerts = " | ".join(outage["alerts"])
        assert "connector postbox-outbox: unreachable" in alerts, alerts
        assert "replication slot postbox_outbox: inactive" in alerts, alerts
        _, slot_lag = lag_alert(group, "--max-slot-lag", "0")  # the held event's WAL is unconfirmed
        assert any("--max-slot-lag 0: Debezium is not confirming the WAL" in a for a in slot_lag["alerts"]), slot_lag
        text = run_cli("lag", group, "--max-lag", "0")
        assert text.returncode == 1 and "alert: connector postbox-outbox: unreachable" in text.stderr, text.stderr

        down = run_cli("status", "--json")
        assert down.returncode == 1, down.stdout[-2000:]
        assert json.loads(down.stdout)["healthy"] is False
        assert run_cli("status").returncode == 1  # the text form agrees
    finally:
        stack = LocalStack()
        stack.up(lambda _line: None)
    read_until(settings.kafka_bootstrap, topic, lambda rs: any(r.event_id == second for r in rs), timeout=120)
    commit_offset(settings.kafka_bootstrap, group, topic, 2)
    code, after = lag_alert(group)
    assert code == 0 and after["alerts"] == [], after  # back to green once Connect streams again


def test_lag_max_lag_trips_while_the_connector_is_paused(settings):
    """A connector that is not RUNNING while Connect itself answers (paused here; FAILED takes the
    same check): `lag --max-lag` names the connector's state, whatever the groups' lag."""
    import httpx

    from postbox.connector import default_connector_name

    base = f"{settings.connect_url.rstrip('/')}/connectors/{default_connector_name()}"

    def state() -> str:
        status = httpx.get(f"{base}/status", timeout=10).json()
        return status["connector"]["state"] + "/" + ",".join(t["state"] for t in status["tasks"])

    httpx.put(f"{base}/pause", timeout=10).raise_for_status()
    try:
        deadline = time.monotonic() + 60
        while not state().startswith("PAUSED"):
            assert time.monotonic() < deadline, state()
            time.sleep(0.5)
        done = run_cli("lag", "--max-lag", str(10**15), "--json")  # no group is that far behind
        assert done.returncode == 1, done.stdout[-2000:]
        alerts = json.loads(done.stdout)["alerts"]
        assert any(a.startswith("connector postbox-outbox: PAUSED") for a in alerts), alerts
    finally:
        httpx.put(f"{base}/resume", timeout=10).raise_for_status()
        deadline = time.monotonic() + 90
        while state() != "RUNNING/RUNNING" and time.monotonic() < deadline:
            time.sleep(0.5)
    assert state() == "RUNNING/RUNNING"
