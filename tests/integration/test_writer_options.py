"""#15: the emit options (``EmitOptions``: version, traceparent, event_id) are declared once and
mean the same on every entry point, sync and async; a misspelt one is refused, not ignored.

What a user relies on: ``version=1`` writes the v1 schema's fingerprint, ``event_id=`` is the
row's id (the Kafka ``id`` header), ``traceparent=`` is stored, whichever of ``Outbox.emit``,
``OutboxTransaction.emit``, ``execute_and_emit`` or their asyncio twins is called; ``versoin=1``
raises TypeError before any SQL, so the transaction stays usable and nothing is written.
Shown to fail: with ``**options`` accepted but not checked in ``RowFactory.prepare`` (scratch
edit), the misspelt option was silently ignored ("DID NOT RAISE").
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest

from postbox.codec import AvroCodec
from postbox.outbox import AsyncOutbox, Outbox, uuid7
from postbox.schemas import SchemaRepository
from postbox.settings import Settings

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
PLACED = {"order_id": "o", "customer_id": "c", "total_cents": 5, "placed_at": datetime(2024, 5, 6, tzinfo=timezone.utc),
          "items": [{"sku": "s", "quantity": 1, "unit_price_cents": 5}]}


def _sync_calls(outbox: Outbox, conn: psycopg.Connection, agg: str) -> dict[str, Callable[..., Any]]:
    """Each sync entry point as ``call(aggregate_id, **options)``, in the caller's transaction."""
    def via_transaction(key: str, **options: Any) -> Any:
        with outbox.transaction(conn, pipeline=False) as tx:
            return tx.emit(agg, key, "OrderPlaced", PLACED, **options)

    def plain(key: str, **options: Any) -> Any:
        with conn.transaction():
            return outbox.emit(conn, agg, key, "OrderPlaced", PLACED, **options)

    def folded(key: str, **options: Any) -> Any:
        with conn.transaction():
            return outbox.execute_and_emit(conn, "SELECT 1", None, agg, key, "OrderPlaced", PLACED, **options)[1]

    return {"Outbox.emit": plain, "OutboxTransaction.emit": via_transaction, "Outbox.execute_and_emit": folded}


async def _async_emits(outbox: AsyncOutbox, agg: str, options: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The asyncio entry points, each with its options; returns what each emitted."""
    out: dict[str, Any] = {}
    async with await psycopg.AsyncConnection.connect(Settings.load().database_url) as aconn:
        async with aconn.transaction():
            out["AsyncOutbox.emit"] = await outbox.emit(aconn, agg, "a1", "OrderPlaced", PLACED, **options["AsyncOutbox.emit"])
            _, out["AsyncOutbox.execute_and_emit"] = await outbox.execute_and_emit(
                aconn, "SELECT 1", None, agg, "a2", "OrderPlaced", PLACED, **options["AsyncOutbox.execute_and_emit"])
        async with outbox.transaction(aconn) as tx:
            out["AsyncOutboxTransaction.emit"] = await tx.emit(agg, "a3", "OrderPlaced", PLACED, **options["AsyncOutboxTransaction.emit"])
    return out


def test_every_entry_point_honours_the_same_options(
    pg_conn: psycopg.Connection, admin_conn: psycopg.Connection, unique: str, tmp_path: Path
) -> None:
    agg = f"opt{unique}"
    shutil.copytree(ROOT / "schemas" / "order", tmp_path / agg)
    repo = SchemaRepository.load(tmp_path)
    v1 = repo.get(agg, "OrderPlaced", 1).fingerprint
    sync, aio = Outbox(codec=AvroCodec(repo)), AsyncOutbox(codec=AvroCodec(repo))
    names = [*_sync_calls(sync, pg_conn, agg), "AsyncOutbox.emit", "AsyncOutbox.execute_and_emit", "AsyncOutboxTransaction.emit"]
    options = {name: {"version": 1, "traceparent": TP, "event_id": uuid7()} for name in names}
    emitted = {name: call(name, **options[name]) for name, call in _sync_calls(sync, pg_conn, agg).items()}
    emitted.update(asyncio.run(_async_emits(aio, agg, options)))
    for name in names:
        event = emitted[name]
        row = admin_conn.execute("SELECT substring(payload FROM 3 FOR 8), traceparent FROM postbox.outbox WHERE id = %s",
                                 (options[name]["event_id"],)).fetchone()
        assert (event.id, event.schema_version, event.traceparent) == (options[name]["event_id"], 1, TP), name
        assert row == (v1, TP), name


def test_a_misspelt_option_is_refused_before_any_sql(
    pg_conn: psycopg.Connection, admin_conn: psycopg.Connection, unique: str, tmp_path: Path
) -> None:
    agg = f"opt{unique}"
    shutil.copytree(ROOT / "schemas" / "order", tmp_path / agg)
    outbox = Outbox(codec=AvroCodec(SchemaRepository.load(tmp_path)))
    with outbox.transaction(pg_conn) as tx:
        with pytest.raises(TypeError, match="versoin"):
            outbox.emit(pg_conn, agg, "bad", "OrderPlaced", PLACED, versoin=1)
        with pytest.raises(TypeError, match="versoin"):
            outbox.execute_and_emit(pg_conn, "SELECT 1", None, agg, "bad", "OrderPlaced", PLACED, versoin=1)
        with pytest.raises(TypeError, match="versoin"):
            tx.emit(agg, "bad", "OrderPlaced", PLACED, versoin=1)
        kept = tx.emit(agg, "good", "OrderPlaced", PLACED)  # nothing was sent: the transaction is usable
    aio = AsyncOutbox(codec=outbox.rows.codec)
    with pytest.raises(TypeError, match="versoin"):
        asyncio.run(_async_emits(aio, agg, {"AsyncOutbox.emit": {"versoin": 1}}))
    assert admin_conn.execute("SELECT array_agg(id) FROM postbox.outbox WHERE aggregate_type = %s", (agg,)).fetchone() == ([kept.id],)
