"""#12.6: retention never drops a row the replication slot has not confirmed, and says why.

In a scratch database with a logical slot of its own, advanced by hand where the connector would
confirm (``pg_replication_slot_advance``). Before the fix retention dropped old partitions whatever
the slot's state: after a lost slot that deleted the last copy of events never published.

Disruptive: a checkpoint's horizon is the cluster-wide snapshot xmin, so a transaction another test
holds open in any database of the stack (beside it on the other pytest worker) makes retention keep
a partition the test expects dropped (rightly: that horizon cannot tell the row was published).
Met in CI with the tests on two workers.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from postbox.db import init_database
from postbox.outbox.republish import republish
from postbox.outbox.retention import run_retention
from postbox.outbox.uuid7 import uuid7

pytestmark = [pytest.mark.integration, pytest.mark.disruptive]
KEEP = timedelta(days=2)
INSERT = "INSERT INTO postbox.outbox (id, aggregate_type, aggregate_id, event_type, payload) VALUES (%s, 'a', 'x', 'E', '\\x00')"


@pytest.fixture
def scratch(admin_database_url: str, unique: str) -> Iterator[tuple[str, str, str]]:
    """(admin URL, maintenance URL, slot name) of a fresh outbox database with its own slot."""
    name, slot = f"postbox_t12x6{unique}", f"t12x6_{unique}"
    with psycopg.connect(admin_database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    admin = make_conninfo(admin_database_url, dbname=name)
    try:
        init_database(admin, app_password=None, cdc_password=None)
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        yield admin, make_conninfo(admin, user="postbox_maint"), slot
    finally:
        with psycopg.connect(admin_database_url, autocommit=True) as conn:
            conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s", (slot,))
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def confirm_everything(admin: str, slot: str) -> None:
    """What the connector does once it has published everything written so far."""
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("SELECT pg_replication_slot_advance(%s, pg_current_wal_lsn())", (slot,))


def old_row(admin: str) -> tuple[str, int]:
    """A row in a partition ten days old: (that partition's name, the row's id time in ms)."""
    old_day = datetime.now(UTC) - timedelta(days=10)
    old_ms = int(old_day.timestamp() * 1000)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("SET ROLE postbox_owner")
        conn.execute("SELECT postbox.outbox_ensure_partitions('1 day', '1 day', %s)", (old_day,))
        row_id = uuid7(old_ms)
        conn.execute(INSERT, (row_id,))
        name = conn.execute("SELECT tableoid::regclass::text FROM postbox.outbox WHERE id = %s", (row_id,)).fetchone()[0]
    return name.removeprefix("postbox."), old_ms


def partitions(admin: str) -> set[str]:
    with psycopg.connect(admin) as conn:
        return {r[0] for r in conn.execute("SELECT partition FROM postbox.outbox_partitions")}


def test_a_partition_with_rows_the_slot_has_not_confirmed_is_kept(scratch: tuple[str, str, str]) -> None:
    admin, maint, slot = scratch
    name, old_ms = old_row(admin)
    first = run_retention(maint, keep=KEEP, slot_name=slot, confirm_wait=timedelta(0))
    assert first.dropped == [] and "not yet confirmed" in (first.refused or "")
    confirm_everything(admin, slot)  # the slot passed the first run's checkpoint ...
    with psycopg.connect(admin, autocommit=True) as conn:  # ... then a late writer (old id) adds a row
        conn.execute(INSERT, (uuid7(old_ms + 1),))
    second = run_retention(maint, keep=KEEP, slot_name=slot, confirm_wait=timedelta(0))
    assert name in partitions(admin) and not any(name in line for line in second.dropped)
    assert any(name in line and "1 row(s)" in line and "may not be in Kafka" in line for line in second.kept), second.kept
    confirm_everything(admin, slot)
    third = run_retention(maint, keep=KEEP, slot_name=slot, confirm_wait=timedelta(0))
    assert f"dropped partition postbox.{name}" in third.dropped and name not in partitions(admin)


def test_a_missing_slot_stops_retention_until_the_rows_are_republished(scratch: tuple[str, str, str]) -> None:
    admin, maint, slot = scratch
    name, _ = old_row(admin)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    refused = run_retention(maint, keep=KEEP, slot_name=slot, confirm_wait=timedelta(0))
    assert refused.dropped == [] and "does not exist" in (refused.refused or "") and name in partitions(admin)

    with psycopg.connect(admin, autocommit=True) as conn:  # a new slot alone does not make the rows published
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    confirm_everything(admin, slot)
    held = run_retention(maint, keep=KEEP, slot_name=slot, confirm_wait=timedelta(0))
    assert held.dropped == [] and "on hold" in (held.refused or "") and "republish" in (held.refused or "")

    report = republish(maint, slot_name=slot)
    assert report.republished == 1 and report.released_holds == 1
    unconfirmed = run_retention(maint, keep=KEEP, slot_name=slot, confirm_wait=timedelta(0))
    assert not any(name in line for line in unconfirmed.dropped)  # republished: new WAL the new slot must confirm first
    confirm_everything(admin, slot)
    done = run_retention(maint, keep=KEEP, slot_name=slot, confirm_wait=timedelta(0))
    assert f"dropped partition postbox.{name}" in done.dropped
