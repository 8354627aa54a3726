"""The writer against real PostgreSQL: atomicity, validation before SQL, batches, grants, retention.

Tests that change grants or drop partitions run in scratch databases (created through the admin
URL: POSTBOX_ADMIN_DATABASE_URL, else the local stack's superuser socket), never in the stack's.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg

from postbox.stack.stack import admin_database_url
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from postbox.codec import AvroCodec
from postbox.db import init_database
from postbox.errors import OutboxError, PayloadError, UnknownEventError
from postbox.outbox import AsyncOutbox, NewEvent, Outbox, Retention
from postbox.outbox.retention import run_retention
from postbox.outbox.uuid7 import uuid7
from postbox.schemas import SchemaRepository
from postbox.settings import Settings

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=timezone.utc)


def admin_url() -> str:
    return admin_database_url()


def repo_for(aggregate: str, tmp_path: Path) -> SchemaRepository:
    """The reference order schemas under a test-only aggregate type (topics stay isolated)."""
    shutil.copytree(ROOT / "schemas" / "order", tmp_path / aggregate)
    return SchemaRepository.load(tmp_path)


def placed(order_id: str, **extra: object) -> dict:
    return {"order_id": order_id, "customer_id": "c", "total_cents": 5, "placed_at": NOW,
            "items": [{"sku": "s", "quantity": 1, "unit_price_cents": 5}], **extra}


def outbox_rows(conn: psycopg.Connection, ids: list) -> int:
    with psycopg.connect(admin_url()) as admin:
        return admin.execute("SELECT count(*) FROM postbox.outbox WHERE id = ANY(%s)", (ids,)).fetchone()[0]


@pytest.fixture
def scratch_db(unique: str) -> Iterator[tuple[str, str]]:
    """(admin URL, app URL) of a fresh database holding the outbox; dropped afterwards."""
    name = f"postbox_t{unique}"
    with psycopg.connect(admin_url(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_conninfo(admin_url(), dbname=name), make_conninfo(Settings.load().database_url, dbname=name)
    finally:
        with psycopg.connect(admin_url(), autocommit=True) as conn:  # a test's slot would block the DROP and hold WAL
            conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = %s", (name,))
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_commit_writes_one_row_and_rollback_none(pg_conn: psycopg.Connection, unique: str, tmp_path: Path) -> None:
    agg = f"t{unique}"
    outbox = Outbox(codec=AvroCodec(repo_for(agg, tmp_path)))
    with outbox.transaction(pg_conn) as tx:
        kept = tx.emit(agg, "o1", "OrderPlaced", placed("o1"), traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    with pytest.raises(RuntimeError):
        with outbox.transaction(pg_conn) as tx:
            lost = tx.emit(agg, "o2", "OrderPlaced", placed("o2"))
            raise RuntimeError("business failure")
    assert outbox_rows(pg_conn, [kept.id]) == 1
    assert outbox_rows(pg_conn, [lost.id]) == 0
    with psycopg.connect(admin_url()) as admin:
        row = admin.execute("SELECT aggregate_type, aggregate_id, event_type, traceparent FROM postbox.outbox WHERE id = %s",
                            (kept.id,)).fetchone()
    assert row == (agg, "o1", "OrderPlaced", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")


def test_invalid_payload_raises_before_sql_and_the_transaction_stays_usable(
    pg_conn: psycopg.Connection, unique: str, tmp_path: Path
) -> None:
    agg = f"t{unique}"
    outbox = Outbox(codec=AvroCodec(repo_for(agg, tmp_path)))
    with pg_conn.transaction():
        before = pg_conn.execute("SELECT 41 + 1").fetchone()
        for bad in [lambda: outbox.emit(pg_conn, agg, "o", "OrderPlaced", placed("o", total_cents="many")),
                    lambda: outbox.emit(pg_conn, agg, "o", "OrderPlaced", {"order_id": "o"}),
                    lambda: outbox.emit(pg_conn, agg, "o", "OrderShipped", {})]:
            with pytest.raises((PayloadError, UnknownEventError)):
                bad()
        # Nothing was sent, so the transaction is not aborted: it still runs and commits.
        assert pg_conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        good = outbox.emit(pg_conn, agg, "o", "OrderPlaced", placed("o"))
        assert pg_conn.execute("SELECT 41 + 1").fetchone() == before
    assert outbox_rows(pg_conn, [good.id]) == 1


def test_batch_emit_keeps_order_and_async_emit(pg_conn: psycopg.Connection, unique: str, tmp_path: Path) -> None:
    agg = f"t{unique}"
    codec = AvroCodec(repo_for(agg, tmp_path))
    outbox = Outbox(codec=codec)
    with pg_conn.transaction():
        emitted = outbox.emit_many(pg_conn, [NewEvent(agg, f"a{i % 7}", "OrderPlaced", placed(str(i))) for i in range(500)])
    ids = [e.id for e in emitted]
    assert outbox_rows(pg_conn, ids) == 500

    async def run() -> list:
        aout = AsyncOutbox(codec=codec)
        async with await psycopg.AsyncConnection.connect(Settings.load().database_url) as aconn:
            async with aout.transaction(aconn) as tx:
                one = await tx.emit(agg, "x", "OrderCancelled", {"order_id": "x", "reason": "r", "cancelled_at": NOW})
                many = await tx.emit_many([NewEvent(agg, "x", "OrderPlaced", placed("x"))] * 3)
        return [one.id, *(m.id for m in many)]

    assert outbox_rows(pg_conn, asyncio.run(run())) == 4


def test_batch_emit_inserts_in_the_order_given(scratch_db: tuple[str, str], unique: str, tmp_path: Path) -> None:
    """The database's insert order (heap order of a fresh table: what the WAL, and so Debezium,
    carries) is the order of the events handed to emit_many, whatever their ids.

    Shown to fail: with ``_send`` inserting ``reversed(rows)`` (scratch edit, not committed) the
    first row in the table was the last event emitted and the test failed."""
    admin, app = scratch_db
    init_database(admin, app_password=None, cdc_password=None, retention="partitions")
    agg = f"t{unique}"
    codec = AvroCodec(repo_for(agg, tmp_path))
    # aggregates interleaved and not in id order, so neither key nor id order can pass for it
    order = [str((i * 37) % 500) for i in range(500)]
    with psycopg.connect(app) as conn:
        with conn.transaction():
            emitted = Outbox(codec=codec).emit_many(conn, [NewEvent(agg, f"a{int(o) % 7}", "OrderPlaced", placed(o)) for o in order])
    with psycopg.connect(admin) as conn:
        rows = conn.execute("SELECT id, payload FROM postbox.outbox ORDER BY ctid").fetchall()
    assert [str(r[0]) for r in rows] == [str(e.id) for e in emitted]
    assert [codec.decode(bytes(r[1])).payload["order_id"] for r in rows] == order


def test_app_role_may_only_insert(pg_conn: psycopg.Connection) -> None:
    # The app may read back the id column (INSERT ... RETURNING id, #13.2), hence count(*) too;
    # never another column of any event.
    for statement in ("SELECT payload FROM postbox.outbox", "SELECT event_type, count(*) FROM postbox.outbox GROUP BY 1",
                      "UPDATE postbox.outbox SET event_type = 'x'", "TRUNCATE postbox.outbox"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            pg_conn.execute(statement)
        pg_conn.rollback()


def test_init_is_idempotent_and_delete_policy_leaves_no_row(scratch_db: tuple[str, str], unique: str, tmp_path: Path) -> None:
    admin, app = scratch_db
    first = init_database(admin, app_password=None, cdc_password=None, retention="delete")
    assert any("created table postbox.outbox" in line for line in first)
    again = init_database(admin, app_password=None, cdc_password=None, retention="delete")
    assert again == ["nothing to change: the outbox is set up"]

    agg = f"t{unique}"
    codec = AvroCodec(repo_for(agg, tmp_path))
    with psycopg.connect(app) as conn:
        with conn.transaction():
            e = Outbox(codec=codec, retention=Retention.DELETE).emit(conn, agg, "o", "OrderPlaced", placed("o"))
        # With partition grants the delete policy is refused, naming the fix.
        changed = init_database(admin, app_password=None, cdc_password=None, retention="partitions")
        assert any(line.startswith("revoked DELETE") for line in changed)
        with pytest.raises(OutboxError, match="retention 'delete'"):
            with conn.transaction():
                Outbox(codec=codec, retention=Retention.DELETE).emit(conn, agg, "o", "OrderPlaced", placed("o"))
    with psycopg.connect(admin) as conn:
        assert conn.execute("SELECT count(*) FROM postbox.outbox WHERE id = %s", (e.id,)).fetchone()[0] == 0


def test_sync_and_async_writers_name_a_missing_outbox_and_a_refused_role_alike(
    scratch_db: tuple[str, str], unique: str, tmp_path: Path
) -> None:
    """#15.2: both writers translate the same database errors (outbox/write_errors.py) into one
    OutboxError with the fix: a database without `postbox db init`, then a role whose grants do
    not match the writer's retention policy."""
    admin, app = scratch_db
    agg = f"t{unique}"
    codec = AvroCodec(repo_for(agg, tmp_path))

    async def emit_async(retention: Retention) -> None:
        async with await psycopg.AsyncConnection.connect(app) as aconn:
            async with aconn.transaction():
                await AsyncOutbox(codec=codec, retention=retention).emit(aconn, agg, "o", "OrderPlaced", placed("o"))

    def emit_sync(retention: Retention) -> None:
        with psycopg.connect(app) as conn, conn.transaction():
            Outbox(codec=codec, retention=retention).emit(conn, agg, "o", "OrderPlaced", placed("o"))

    for emit in (emit_sync, lambda r: asyncio.run(emit_async(r))):
        with pytest.raises(OutboxError, match="postbox.outbox does not exist in this database") as missing:
            emit(Retention.PARTITIONS)
        assert "postbox db init" in (missing.value.fix or "")
    init_database(admin, app_password=None, cdc_password=None, retention="partitions")
    for emit in (emit_sync, lambda r: asyncio.run(emit_async(r))):
        with pytest.raises(OutboxError, match="may not write postbox.outbox with retention 'delete'") as refused:
            emit(Retention.DELETE)
        assert "--retention delete" in (refused.value.fix or "")


def test_retention_drops_old_partitions_and_purges_the_default(scratch_db: tuple[str, str], unique: str) -> None:
    admin, _ = scratch_db
    init_database(admin, app_password=None, cdc_password=None)  # roles are cluster-wide: keep passwords
    # Retention drops only what a replication slot of this database has confirmed (#12.6): a slot
    # of our own, made before the rows and advanced by hand where a connector would confirm.
    slot = f"t_retention_{unique}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    old_day = datetime.now(timezone.utc) - timedelta(days=10)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("SET ROLE postbox_owner")
        conn.execute("SELECT postbox.outbox_ensure_partitions('1 day', '1 day', %s)", (old_day,))
        old_ms = int(old_day.timestamp() * 1000)
        conn.execute(
            "INSERT INTO postbox.outbox (id, aggregate_type, aggregate_id, event_type, payload, created_at)"
            " VALUES (%s, 'a', 'x', 'E', '\\x00', %s), (%s, 'a', 'x', 'E', '\\x00', %s)",
            (uuid7(old_ms), old_day, uuid7(old_ms - 20 * 86_400_000), old_day),  # 2nd lands in the default partition
        )
        old_parts = [r[0] for r in conn.execute(
            "SELECT partition FROM postbox.outbox_partitions WHERE upper_time < now() - interval '2 days'")]
        assert old_parts
    # As the maintenance role, through the admin URL's socket (its password belongs to the stack).
    maint = make_conninfo(admin, user="postbox_maint")
    first = run_retention(maint, keep=timedelta(days=2), slot_name=slot, confirm_wait=timedelta(0))
    assert first.dropped == [] and first.refused and "not yet confirmed" in first.refused
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("SELECT pg_replication_slot_advance(%s, pg_current_wal_lsn())", (slot,))
    dry = run_retention(maint, keep=timedelta(days=2), dry_run=True, slot_name=slot)
    assert dry.dropped and dry.purged_default_rows == 0
    # As cron runs it: a run may keep a partition while a write transaction anywhere in the cluster
    # (another test beside this one) still holds the snapshot horizon back; a later run drops it.
    dropped: set[str] = set()
    purged = 0
    for _ in range(5):
        report = run_retention(maint, keep=timedelta(days=2), slot_name=slot, confirm_wait=timedelta(0))
        dropped |= {line.rsplit(".", 1)[-1] for line in report.dropped}
        purged += report.purged_default_rows
        assert report.created == []  # init already made the partitions ahead
        if dropped == set(old_parts) and purged:
            break
        time.sleep(2)
    second = run_retention(maint, keep=timedelta(days=2), slot_name=slot, confirm_wait=timedelta(0))
    assert dropped == set(old_parts)
    assert purged == 1
    assert second.dropped == []  # a second run has nothing to do
    with psycopg.connect(admin) as conn:
        assert conn.execute("SELECT count(*) FROM postbox.outbox").fetchone()[0] == 0
