"""A large ``emit_many`` (one binary COPY) in the transaction a service holds, on the real database.

What a service relies on: the COPY form joins the caller's transaction exactly as the INSERT form
does, whatever holds it: a psycopg connection with autocommit off (the COPY is the first
statement: it begins the transaction), a SQLAlchemy Session or AsyncSession (commit-as-you-go
included), Django's ``transaction.atomic()``. The business row and the batch commit together, and
a rollback, an exception or a savepoint rolled back takes the whole batch with the row. Each test
first checks the batch does take the COPY form on the connection under the framework.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from postbox.outbox import AsyncOutbox, NewEvent, Outbox
from postbox.outbox.connection_lookup import sync_connection
from postbox.outbox.core import COPY_MIN_ROWS
from postbox.settings import Settings
from tests.integration.service_tables import Business, business  # noqa: F401 (a fixture)
from tests.support.django_project import django_connections

pytestmark = pytest.mark.integration

OUTBOX = Outbox(encoding="json")
ASYNC_OUTBOX = AsyncOutbox(encoding="json")
N = 3 * COPY_MIN_ROWS


def batch(biz: Business, row: str) -> list[NewEvent]:
    return [NewEvent(biz.aggregate_type, row, "Happened", {"n": i, "text": f"é{i}"}) for i in range(N)]


def insert(biz: Business, row_id: str) -> sa.Insert:
    return sa.insert(sa.table(biz.table, sa.column("id"))).values(id=row_id)


def stored_n(admin_conn: psycopg.Connection, biz: Business, row: str) -> list[int]:
    """The ``n`` of each stored event of ``row``, in the order the database took them."""
    found = admin_conn.execute("SELECT convert_from(payload, 'UTF8')::jsonb->>'n' FROM postbox.outbox"
                               " WHERE aggregate_type = %s AND aggregate_id = %s ORDER BY created_at, ctid",
                               (biz.aggregate_type, row)).fetchall()
    return [int(n) for (n,) in found]


@pytest.fixture
def engine(settings: Settings) -> Iterator[sa.Engine]:
    made = sa.create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(settings.database_url))
    yield made
    made.dispose()


def test_psycopg_autocommit_off_the_copy_begins_the_transaction_and_commits_or_rolls_back_with_it(
        settings: Settings, business: Business, admin_conn: psycopg.Connection) -> None:
    with psycopg.connect(settings.database_url) as conn:
        assert OUTBOX.plan_many(batch(business, "x")).copies(conn)
        OUTBOX.emit_many(conn, batch(business, "lost"))  # the first statement: psycopg begins before it
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        conn.rollback()
        OUTBOX.emit_many(conn, batch(business, "kept"))
        conn.execute(business.insert_sql(), ["kept"])
        assert business.committed(admin_conn, "kept") == (0, 0)  # nothing visible before the commit
        conn.commit()
    assert business.committed(admin_conn, "lost") == (0, 0)
    assert business.committed(admin_conn, "kept") == (1, N)
    assert stored_n(admin_conn, business, "kept") == list(range(N))


@pytest.mark.parametrize("path", ["commit-as-you-go", "rollback", "savepoint"])
def test_sqlalchemy_session_commits_or_rolls_back_the_copied_batch_with_the_row(
        engine: sa.Engine, business: Business, admin_conn: psycopg.Connection, path: str) -> None:
    with Session(engine) as session:
        if path == "commit-as-you-go":  # the COPY is the session's first statement: it is begun
            assert OUTBOX.plan_many(batch(business, "x")).copies(sync_connection(session))
            OUTBOX.emit_many(session, batch(business, "kept"))
            session.execute(insert(business, "kept"))
            session.commit()
        elif path == "rollback":
            session.execute(insert(business, "lost"))
            OUTBOX.emit_many(session, batch(business, "lost"))
            session.rollback()
        else:
            with session.begin():
                session.execute(insert(business, "kept"))
                OUTBOX.emit_many(session, batch(business, "kept"))
                with pytest.raises(RuntimeError), session.begin_nested():
                    session.execute(insert(business, "lost"))
                    OUTBOX.emit_many(session, batch(business, "lost"))
                    raise RuntimeError("the nested step fails")
    assert business.committed(admin_conn, "lost") == (0, 0)
    if path != "rollback":
        assert business.committed(admin_conn, "kept") == (1, N)
        assert stored_n(admin_conn, business, "kept") == list(range(N))


def test_sqlalchemy_async_session_commits_or_rolls_back_the_copied_batch_with_the_row(
        settings: Settings, business: Business, admin_conn: psycopg.Connection) -> None:
    async def connect() -> psycopg.AsyncConnection:
        return await psycopg.AsyncConnection.connect(settings.database_url)

    async def run() -> None:
        made = create_async_engine("postgresql+psycopg://", async_creator=connect)
        try:
            async with AsyncSession(made) as session:
                await ASYNC_OUTBOX.emit_many(session, batch(business, "kept"))  # begins the session's transaction
                await session.execute(insert(business, "kept"))
                await session.commit()
                with pytest.raises(RuntimeError):
                    async with session.begin():
                        await session.execute(insert(business, "lost"))
                        await ASYNC_OUTBOX.emit_many(session, batch(business, "lost"))
                        raise RuntimeError("the business logic fails after the emit")
        finally:
            await made.dispose()

    asyncio.run(run())
    assert business.committed(admin_conn, "lost") == (0, 0)
    assert business.committed(admin_conn, "kept") == (1, N)
    assert stored_n(admin_conn, business, "kept") == list(range(N))


@pytest.fixture
def django_db() -> Iterator[Any]:
    django_connections()
    from django.db import connection, transaction

    yield connection, transaction
    connection.close()


def test_django_atomic_commits_or_rolls_back_the_copied_batch_with_the_row(
        django_db: Any, business: Business, admin_conn: psycopg.Connection) -> None:
    connection, transaction = django_db
    with transaction.atomic():
        assert OUTBOX.plan_many(batch(business, "x")).copies(sync_connection(connection))
        with connection.cursor() as cur:
            cur.execute(business.insert_sql(), ["kept"])
        OUTBOX.emit_many(connection, batch(business, "kept"))
        with pytest.raises(RuntimeError), transaction.atomic():  # a savepoint
            with connection.cursor() as cur:
                cur.execute(business.insert_sql(), ["lost"])
            OUTBOX.emit_many(connection, batch(business, "lost"))
            raise RuntimeError("the nested step fails")
        assert business.committed(admin_conn, "kept") == (0, 0)
    assert business.committed(admin_conn, "lost") == (0, 0)
    assert business.committed(admin_conn, "kept") == (1, N)
    assert stored_n(admin_conn, business, "kept") == list(range(N))
