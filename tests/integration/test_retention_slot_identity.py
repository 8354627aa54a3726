"""Retention after the replication slot was replaced between two runs that never saw it missing.

A slot dropped and created again under the same name (a lost slot replaced, a failover, the
connector re-registered) starts at the WAL position of its creation: it never streamed the rows
written before it, yet its ``confirmed_flush_lsn`` is past every older retention checkpoint.
Before checkpoints carried the slot's identity, the next run (a daily cron) took those
checkpoints as confirmed and dropped the rows the old slot never published: the last copy.

Disruptive: it drops and creates replication slots and restarts a server, so it runs on a private
PostgreSQL cluster of its own (never the shared stack's), with the stack's configuration
(``wal_level = logical``). The connector is played by ``pg_replication_slot_advance``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from postbox.db import init_database
from postbox.errors import RetentionError
from postbox.outbox.republish import republish
from postbox.outbox.retention import run_retention
from postbox.outbox.slot_identity import GRANT
from postbox.outbox.uuid7 import uuid7
from postbox.stack.postgres import LocalPostgres
from tests.support.private_postgres import private_postgres

pytestmark = [pytest.mark.integration, pytest.mark.disruptive]
KEEP = timedelta(days=2)
SLOT = "postbox_outbox"
INSERT = "INSERT INTO postbox.outbox (id, aggregate_type, aggregate_id, event_type, payload) VALUES (%s, 'a', 'x', 'E', '\\x00')"


@pytest.fixture(scope="module")
def server() -> Iterator[LocalPostgres]:
    with private_postgres() as pg:
        yield pg


@dataclass
class Outbox:
    server: LocalPostgres
    admin: str  # superuser, on the outbox's database
    maint: str  # postbox_maint, as cron runs retention
    init: list[str]  # what `postbox db init` said

    def sql(self, statement: str, *args: object) -> list[tuple]:
        with psycopg.connect(self.admin, autocommit=True) as conn:
            cur = conn.execute(statement, args)
            return cur.fetchall() if cur.description else []

    def confirm_everything(self) -> None:
        """What the connector does once it has published everything written so far."""
        self.sql("SELECT pg_replication_slot_advance(%s, pg_current_wal_lsn())", SLOT)

    def replace_slot(self) -> None:
        """Drop the slot and create one of the same name: what re-registering the connector after a
        lost slot, or a failover to a server without the slot, leaves."""
        self.sql("SELECT pg_drop_replication_slot(%s)", SLOT)
        self.sql("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", SLOT)

    def old_row(self) -> tuple[str, int]:
        """A row in a partition ten days old: (that partition's name, the row's id time in ms)."""
        old_day = datetime.now(UTC) - timedelta(days=10)
        old_ms = int(old_day.timestamp() * 1000)
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute("SET ROLE postbox_owner")
            conn.execute("SELECT postbox.outbox_ensure_partitions('1 day', '1 day', %s)", (old_day,))
            row_id = uuid7(old_ms)
            conn.execute(INSERT, (row_id,))
            name = conn.execute("SELECT tableoid::regclass::text FROM postbox.outbox WHERE id = %s", (row_id,)).fetchone()[0]
        return name.removeprefix("postbox."), old_ms

    def late_row(self, old_ms: int) -> None:
        """A late writer adds a row with an old id (it lands in the old partition)."""
        self.sql(INSERT, uuid7(old_ms + 1))

    def partitions(self) -> set[str]:
        return {r[0] for r in self.sql("SELECT partition FROM postbox.outbox_partitions")}

    def retention(self):  # noqa: ANN201 - the report
        return run_retention(self.maint, keep=KEEP, confirm_wait=timedelta(0))


@pytest.fixture
def outbox(server: LocalPostgres, unique: str) -> Iterator[Outbox]:
    """A fresh outbox database on the private cluster with the pipeline's slot."""
    name = f"shop_{unique}"
    with psycopg.connect(server.admin_url("postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    admin = server.admin_url(name)
    try:
        lines = init_database(admin, app_password=None, cdc_password=None)
        box = Outbox(server, admin, make_conninfo(admin, user="postbox_maint"), lines)
        box.sql("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", SLOT)
        yield box
    finally:
        with psycopg.connect(server.admin_url("postgres"), autocommit=True) as conn:
            conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s", (SLOT,))
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_a_row_the_old_slot_never_published_survives_a_replaced_slot(outbox: Outbox) -> None:
    name, _ = outbox.old_row()  # the connector is down: the slot never streams this row
    first = outbox.retention()  # Monday's cron: a checkpoint the slot has not confirmed
    assert first.dropped == [] and "not yet confirmed" in (first.refused or "")
    outbox.replace_slot()  # during the day: the slot is replaced; no run sees it missing
    second = outbox.retention()  # Tuesday's cron
    assert name in outbox.partitions(), f"dropped the last copy of a row never published: {second.dropped}"
    assert second.dropped == [] and second.purged_default_rows == 0
    refused = second.refused or ""
    assert f"replication slot {SLOT} is not the one that confirmed" in refused, refused
    assert "postbox db republish" in refused and "docs/recovery.md" in refused


def test_rows_written_after_the_last_confirmed_run_survive_a_replaced_slot(outbox: Outbox) -> None:
    name, old_ms = outbox.old_row()
    outbox.retention()
    outbox.confirm_everything()  # the connector published everything so far ...
    outbox.late_row(old_ms)  # ... then a row it never publishes: the slot is replaced first
    outbox.replace_slot()
    held = outbox.retention()
    outbox.confirm_everything()  # the new slot confirms all it streams, from its creation on
    again = outbox.retention()
    assert name in outbox.partitions(), f"dropped the last copy of a row never published: {held.dropped + again.dropped}"
    assert "is not the one that confirmed" in (held.refused or "") and "on hold" in (again.refused or "")


def test_after_a_replaced_slot_the_republished_rows_go_once_the_new_slot_confirms_them(outbox: Outbox) -> None:
    name, _ = outbox.old_row()
    outbox.retention()
    outbox.replace_slot()
    assert "is not the one that confirmed" in (outbox.retention().refused or "")
    report = republish(outbox.maint)
    assert report.republished == 1 and report.released_holds == 1
    unconfirmed = outbox.retention()
    assert name in outbox.partitions() and "not yet confirmed" in (unconfirmed.refused or "")
    outbox.confirm_everything()
    done = outbox.retention()
    assert f"dropped partition postbox.{name}" in done.dropped, done


def test_a_restart_of_the_server_keeps_the_slot_s_identity(outbox: Outbox) -> None:
    name, _ = outbox.old_row()
    outbox.retention()
    outbox.server.stop("fast")
    outbox.server.start()
    outbox.confirm_everything()
    done = outbox.retention()
    assert f"dropped partition postbox.{name}" in done.dropped, done


def test_without_the_grant_to_stamp_the_slot_retention_drops_nothing_and_names_the_grant(outbox: Outbox) -> None:
    assert any(line.startswith("granted EXECUTE on pg_stat_reset_replication_slot(text) to postbox_owner")
               for line in outbox.init), outbox.init
    outbox.sql("REVOKE EXECUTE ON FUNCTION pg_catalog.pg_stat_reset_replication_slot(text) FROM postbox_owner")
    name, _ = outbox.old_row()
    outbox.confirm_everything()
    refused = outbox.retention()
    assert name in outbox.partitions() and (refused.refused or "").endswith(GRANT), refused.refused
    outbox.sql(GRANT)  # the fix, as a superuser
    outbox.retention()
    outbox.confirm_everything()
    done = outbox.retention()
    assert f"dropped partition postbox.{name}" in done.dropped, done


def test_after_a_crash_retention_holds_names_the_crash_and_trust_slot_releases_it(outbox: Outbox) -> None:
    """A crash discards every statistic, the slot's stamp with it: retention cannot tell the slot
    from a replaced one, so it holds, says the statistics were discarded, and offers the operator
    who knows the slot survived (`--trust-slot`) a way out that republishes nothing."""
    name, _ = outbox.old_row()
    outbox.retention()
    outbox.server.stop("immediate")
    outbox.server.start()
    outbox.confirm_everything()
    held = outbox.retention()
    refused = held.refused or ""
    assert name in outbox.partitions() and held.dropped == [], held.dropped
    assert "discarded its statistics" in refused and "--trust-slot" in refused, refused
    assert "on hold" in (outbox.retention().refused or "")
    trusted = run_retention(outbox.maint, keep=KEEP, confirm_wait=timedelta(0), trust_slot=True)
    assert f"dropped partition postbox.{name}" in trusted.dropped, trusted


def test_trust_slot_does_not_release_a_replaced_slot_s_hold(outbox: Outbox) -> None:
    name, _ = outbox.old_row()
    outbox.retention()
    outbox.replace_slot()
    outbox.confirm_everything()
    assert "is not the one that confirmed" in (outbox.retention().refused or "")
    with pytest.raises(RetentionError) as refused:
        run_retention(outbox.maint, keep=KEEP, confirm_wait=timedelta(0), trust_slot=True)
    assert "postbox db republish" in str(refused.value) and name in outbox.partitions()


def test_a_slot_dropped_after_the_crash_hold_still_needs_a_republish(outbox: Outbox) -> None:
    """The crash's hold may be vouched for; a slot found missing later adds a hold that may not."""
    name, _ = outbox.old_row()
    outbox.retention()
    outbox.server.stop("immediate")
    outbox.server.start()
    assert "discarded its statistics" in (outbox.retention().refused or "")
    outbox.sql("SELECT pg_drop_replication_slot(%s)", SLOT)
    assert "does not exist" in (outbox.retention().refused or "")  # the slot is missing
    outbox.sql("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", SLOT)
    outbox.confirm_everything()
    with pytest.raises(RetentionError) as refused:
        run_retention(outbox.maint, keep=KEEP, confirm_wait=timedelta(0), trust_slot=True)
    assert "--trust-slot cannot release this hold" in str(refused.value) and name in outbox.partitions()
