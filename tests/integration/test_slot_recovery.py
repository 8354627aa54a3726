"""#12.6: a replication slot invalidated during a Connect outage, and the tested way back.

For real, on the local stack: the connector is stopped, events are written, the slot is
invalidated the way a long outage does it (``max_slot_wal_keep_size`` exceeded: set to 1 MB here,
WAL segments switched, a CHECKPOINT), and then:

- `postbox doctor`, `postbox status` and `postbox lag` show ``wal_status lost``;
- `postbox db retention` drops nothing and says why, and holds until the rows are republished;
- the recovery of docs/recovery.md (forget the connector's offsets, drop the slot, resume: the
  connector makes a new slot; then `postbox db republish`) brings every event written during the
  outage to Kafka. Duplicates are allowed (consumers dedupe), loss is not.

Before the fix nothing showed the slot's wal_status or the WAL left, retention ignored the slot,
and there was no republish: the events written during the outage never reached Kafka.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta

import httpx
import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from postbox.outbox import Outbox
from postbox.outbox.retention import run_retention
from postbox.slot import SLOT_NAME, slot_status
from postbox.connector import default_connector_name
from tests.support.consumers import wait_for
from tests.support.kafka import read_until

pytestmark = [pytest.mark.integration, pytest.mark.disruptive]


class Connector:
    """The few Kafka Connect REST calls the recovery uses (as the runbook does with curl)."""

    def __init__(self, url: str) -> None:
        self.base = f"{url.rstrip('/')}/connectors/{default_connector_name()}"

    def call(self, method: str, path: str = "") -> httpx.Response:
        response = httpx.request(method, self.base + path, timeout=30)
        assert response.status_code < 300, (method, path, response.status_code, response.text)
        return response

    def state(self) -> tuple[str, list[str]]:
        body = self.call("GET", "/status").json()
        return body["connector"]["state"], [t["state"] for t in body["tasks"]]


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "postbox", *args], check=False, capture_output=True, text=True, timeout=180, env=env)


def wal_status(admin: psycopg.Connection) -> str | None:
    row = admin.execute("SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s", (SLOT_NAME,)).fetchone()
    return row[0] if row else None


def recover(connector: Connector, admin: psycopg.Connection) -> None:
    """docs/recovery.md steps 2-3: forget the position, drop the lost slot, let the connector make a new one."""
    connector.call("PUT", "/stop")
    wait_for(lambda: connector.state()[0] == "STOPPED", 60, "the connector to stop")
    connector.call("DELETE", "/offsets")
    if wal_status(admin) is not None:
        admin.execute("SELECT pg_drop_replication_slot(%s)", (SLOT_NAME,))
    connector.call("PUT", "/resume")
    wait_for(lambda: slot_status(ADMIN_URL[0]).get("state") == "active", 90, "the connector to create and read a new slot")


ADMIN_URL: list[str] = []  # the admin URL, for recover() (set by the fixture)


@pytest.fixture
def outage(settings, admin_database_url: str) -> Iterator[tuple[Connector, psycopg.Connection]]:
    """The connector stopped; afterwards the stack is healthy again whatever happened."""
    ADMIN_URL[:] = [admin_database_url]
    connector = Connector(settings.connect_url)
    admin = psycopg.connect(admin_database_url, autocommit=True)
    connector.call("PUT", "/stop")
    wait_for(lambda: connector.state()[0] == "STOPPED", 60, "the connector to stop")
    try:
        yield connector, admin
    finally:
        admin.execute("ALTER SYSTEM RESET max_slot_wal_keep_size")
        admin.execute("SELECT pg_reload_conf()")
        if wal_status(admin) in (None, "lost") or connector.state()[0] != "RUNNING":
            recover(connector, admin)
        admin.execute("DELETE FROM postbox.retention_holds")
        admin.close()


def invalidate_slot(admin: psycopg.Connection) -> None:
    """What a long outage does: the slot's WAL passes max_slot_wal_keep_size and a checkpoint drops it."""
    admin.execute("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'")
    admin.execute("SELECT pg_reload_conf()")
    for _ in range(10):
        admin.execute("SELECT pg_logical_emit_message(false, 'postbox-test-wal', repeat('x', 1000))")
        admin.execute("SELECT pg_switch_wal()")
        admin.execute("CHECKPOINT")
        if wal_status(admin) == "lost":
            break
    admin.execute("ALTER SYSTEM RESET max_slot_wal_keep_size")
    admin.execute("SELECT pg_reload_conf()")
    assert wal_status(admin) == "lost"


def test_lost_slot_is_shown_retention_holds_and_republish_delivers_every_event(
    settings, pg_conn, admin_database_url, unique, outage,
) -> None:
    connector, admin = outage
    aggregate = f"t12x6{unique}"
    topic = f"outbox.event.{aggregate}"
    outbox = Outbox(encoding="json")
    with pg_conn.transaction():  # written while Connect is down: only the slot would have carried them
        during = [outbox.emit(pg_conn, aggregate, f"a{i % 3}", "Happened", {"n": i}) for i in range(20)]

    invalidate_slot(admin)
    connector.call("PUT", "/resume")  # the connector cannot use the lost slot: nothing is published

    doctor = {c["check"]: c for c in json.loads(cli("doctor", "--json").stdout)["checks"]}
    assert doctor["replication slot"]["status"] == "fail"
    assert "wal_status lost" in doctor["replication slot"]["detail"]
    assert "docs/recovery.md" in doctor["replication slot"]["fix"]
    assert json.loads(cli("status", "--json").stdout)["slot"]["wal_status"] == "lost"
    status = cli("status")
    assert "wal_status lost" in " ".join(status.stdout.split()) and status.returncode == 1
    lag = json.loads(cli("lag", "--json").stdout)
    assert lag["slot"]["wal_status"] == "lost" and lag["slot"]["safe_wal_size"] is None

    maint = make_conninfo(admin_database_url, user="postbox_maint")
    held = run_retention(maint, keep=timedelta(minutes=1), confirm_wait=timedelta(0))
    assert held.dropped == [] and held.purged_default_rows == 0
    assert held.refused and "lost" in held.refused and "docs/recovery.md" in held.refused

    recover(connector, admin)  # a new slot: the events above are not in any WAL it will stream
    again = run_retention(maint, keep=timedelta(minutes=1), confirm_wait=timedelta(0))
    assert again.dropped == [] and again.refused and "on hold" in again.refused  # the new slot does not release it

    done = cli("db", "republish", "--url", maint, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["republished"] >= len(during) and report["released_holds"] == 1

    wanted = {str(e.id) for e in during}
    records = read_until(settings.kafka_bootstrap, topic, lambda rs: wanted <= {r.event_id for r in rs}, timeout=120)
    assert wanted <= {r.event_id for r in records}, f"lost: {sorted(wanted - {r.event_id for r in records})}"
    by_id = {r.event_id: r for r in records}
    assert all(by_id[str(e.id)].key == e.aggregate_id.encode() for e in during)

    with pg_conn.transaction():  # and the pipeline carries new events again
        after = outbox.emit(pg_conn, aggregate, "a0", "Happened", {"n": 99})
    records = read_until(settings.kafka_bootstrap, topic, lambda rs: str(after.id) in {r.event_id for r in rs}, timeout=60)
    assert str(after.id) in {r.event_id for r in records}
    assert connector.state() == ("RUNNING", ["RUNNING"])
