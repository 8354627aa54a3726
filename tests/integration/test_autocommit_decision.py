"""How the writer decides that an emit would commit on its own (postbox.outbox.transaction_check),
through every state a psycopg connection passes through, sync and async.

The decision reads psycopg's own state: ``autocommit``, libpq's transaction status, and in
pipeline mode (where libpq says ACTIVE while statements are queued, whatever the transaction)
psycopg's count of open ``transaction()`` blocks. None of that exists without a real connection,
so these tests run on the stack's PostgreSQL; each asks ``in_transaction_block`` at one point of
a connection's life and checks ``require_transaction`` agrees, including on the way *out* of a
transaction (a block closed, a COMMIT, a ROLLBACK), where an emit must be refused again.
tests/integration/test_writer_transactions.py checks the emits themselves.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from postbox.errors import NoTransactionError
from postbox.outbox import Outbox
from postbox.outbox.transaction_check import in_transaction_block, require_transaction
from postbox.settings import Settings

pytestmark = pytest.mark.integration


def joins(conn: Any) -> bool:
    """The decision, checked against the refusal it drives."""
    decided = in_transaction_block(conn)
    try:
        require_transaction(conn)
    except NoTransactionError as exc:
        assert not decided, "refused although in a transaction block"
        assert "autocommit" in str(exc) and exc.fix and "transaction()" in exc.fix
        return False
    assert decided, "accepted although the INSERT would commit alone"
    return True


@pytest.fixture
def autocommit(settings: Settings) -> Any:
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        yield conn


def test_idle_in_autocommit_is_refused(autocommit: psycopg.Connection) -> None:
    assert not joins(autocommit)


def test_transaction_blocks_join_nested_ones_too_and_closing_the_outer_one_refuses_again(autocommit: psycopg.Connection) -> None:
    with autocommit.transaction():
        assert joins(autocommit)
        with autocommit.transaction():  # a savepoint
            assert joins(autocommit)
        assert joins(autocommit)
    assert not joins(autocommit)


def test_an_explicit_begin_joins_until_its_commit_or_rollback(autocommit: psycopg.Connection) -> None:
    for end in ("COMMIT", "ROLLBACK"):
        autocommit.execute("BEGIN")
        assert joins(autocommit)
        autocommit.execute(end)
        assert not joins(autocommit), end


def test_a_failed_transaction_still_counts_as_the_callers(autocommit: psycopg.Connection) -> None:
    """INERROR: an emit goes into the caller's failed transaction (PostgreSQL refuses it and the
    whole transaction rolls back), never into one of its own."""
    autocommit.execute("BEGIN")
    with pytest.raises(psycopg.errors.DivisionByZero):
        autocommit.execute("SELECT 1 / 0")
    assert autocommit.info.transaction_status == psycopg.pq.TransactionStatus.INERROR
    assert joins(autocommit)
    autocommit.execute("ROLLBACK")
    assert not joins(autocommit)


def test_in_pipeline_mode_the_open_transaction_blocks_decide_not_libpqs_status(autocommit: psycopg.Connection) -> None:
    with autocommit.pipeline():
        assert not joins(autocommit)  # nothing queued: IDLE
        autocommit.execute("SELECT 1")  # queued: libpq says ACTIVE, and no transaction is open
        assert autocommit.info.transaction_status == psycopg.pq.TransactionStatus.ACTIVE
        assert not joins(autocommit)
        with autocommit.transaction():
            autocommit.execute("SELECT 1")
            assert autocommit.info.transaction_status == psycopg.pq.TransactionStatus.ACTIVE
            assert joins(autocommit)
        autocommit.execute("SELECT 1")  # the block closed, still in the pipeline
        assert not joins(autocommit)


def test_autocommit_off_always_joins_psycopgs_own_transaction(settings: Settings) -> None:
    with psycopg.connect(settings.database_url) as conn:
        assert joins(conn)  # idle: the first statement opens the transaction
        conn.execute("SELECT 1")
        assert joins(conn)
        conn.commit()
        assert joins(conn)
        with conn.pipeline():
            conn.execute("SELECT 1")
            assert joins(conn)


def test_an_emit_after_a_transaction_block_closed_is_refused_and_writes_nothing(
    autocommit: psycopg.Connection, admin_conn: psycopg.Connection, unique: str
) -> None:
    outbox = Outbox(encoding="json")
    with autocommit.transaction():
        outbox.emit(autocommit, "tautoc", unique, "Happened", {"n": 1})
    with pytest.raises(NoTransactionError):
        outbox.emit(autocommit, "tautoc", unique, "Happened", {"n": 2})
    count = admin_conn.execute("SELECT count(*) FROM postbox.outbox WHERE aggregate_id = %s", (unique,)).fetchone()
    assert count == (1,)


def test_an_async_connection_is_decided_the_same_way(settings: Settings) -> None:
    async def scenario() -> list[bool]:
        seen = []
        async with await psycopg.AsyncConnection.connect(settings.database_url, autocommit=True) as conn:
            seen.append(joins(conn))
            async with conn.transaction():
                seen.append(joins(conn))
            seen.append(joins(conn))
            async with conn.pipeline():
                await conn.execute("SELECT 1")
                seen.append(joins(conn))
                async with conn.transaction():
                    await conn.execute("SELECT 1")
                    seen.append(joins(conn))
            await conn.execute("BEGIN")
            seen.append(joins(conn))
            await conn.execute("COMMIT")
            seen.append(joins(conn))
        return seen

    assert asyncio.run(scenario()) == [False, True, False, False, True, True, False]
