"""Emit in a SQLAlchemy 2 transaction (postgresql+psycopg), sync and asyncio, on the real database.

What a service relies on: ``outbox.emit(session, ...)`` (or a Connection, an AsyncSession, an
AsyncConnection) writes the event in the transaction SQLAlchemy holds, so the business row and the
event commit together, and every way that transaction can end without committing (rollback, an
exception in the block, a savepoint rolled back, a connection closed uncommitted) takes both with
it. A SQLAlchemy connection that has not begun a transaction yet is begun, as SQLAlchemy's own
first execute would: ``conn.commit()`` then commits the event. An engine in AUTOCOMMIT is refused,
like an autocommit psycopg connection. Before, any of these failed with a bare AttributeError.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, scoped_session, sessionmaker

from postbox.errors import NoTransactionError
from postbox.outbox import AsyncOutbox, NewEvent, Outbox
from postbox.settings import Settings
from tests.integration.service_tables import Business, business  # noqa: F401 (a fixture)

pytestmark = pytest.mark.integration

OUTBOX = Outbox(encoding="json")
ASYNC_OUTBOX = AsyncOutbox(encoding="json")


@pytest.fixture
def engine(settings: Settings) -> Iterator[sa.Engine]:
    """The service's engine on the psycopg 3 dialect, as the app role."""
    made = sa.create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(settings.database_url))
    yield made
    made.dispose()


def make_async_engine(settings: Settings, **kwargs: object) -> AsyncEngine:
    async def connect() -> psycopg.AsyncConnection:
        return await psycopg.AsyncConnection.connect(settings.database_url)

    return create_async_engine("postgresql+psycopg://", async_creator=connect, **kwargs)


def insert(biz: Business, row_id: str) -> sa.Insert:
    return sa.insert(sa.table(biz.table, sa.column("id"))).values(id=row_id)


def test_session_commits_the_orm_row_and_the_event_together(engine: sa.Engine, business: Business, admin_conn: psycopg.Connection) -> None:
    class Base(DeclarativeBase):
        pass

    class Row(Base):
        __tablename__ = business.table
        id: Mapped[str] = mapped_column(primary_key=True)

    with Session(engine) as session, session.begin():
        session.add(Row(id="kept"))  # flushed at commit, after the event's INSERT: one transaction all the same
        event = OUTBOX.emit(session, business.aggregate_type, "kept", "Happened", {"n": 1})
        assert business.committed(admin_conn, "kept") == (0, 0)  # nothing visible before the commit
    assert business.committed(admin_conn, "kept") == (1, 1)
    assert admin_conn.execute("SELECT event_type FROM postbox.outbox WHERE id = %s", (event.id,)).fetchone() == ("Happened",)

    with Session(engine) as session:  # commit-as-you-go: the session begins at the emit
        OUTBOX.emit_many(session, [NewEvent(business.aggregate_type, "many", "Happened", {"n": i}) for i in range(3)])
        session.execute(insert(business, "many"))
        session.commit()
    assert business.committed(admin_conn, "many") == (1, 3)

    scoped = scoped_session(sessionmaker(engine))  # the thread's session, as Flask-SQLAlchemy's db.session
    OUTBOX.emit(scoped, business.aggregate_type, "scoped", "Happened", {"n": 1})
    scoped.execute(insert(business, "scoped"))
    scoped.commit()
    scoped.remove()
    assert business.committed(admin_conn, "scoped") == (1, 1)


@pytest.mark.parametrize("path", ["rollback", "exception", "savepoint", "closed"])
def test_every_session_rollback_takes_row_and_event(engine: sa.Engine, business: Business, admin_conn: psycopg.Connection, path: str) -> None:
    agg = business.aggregate_type
    with Session(engine) as session:
        if path == "rollback":
            session.execute(insert(business, "lost"))
            OUTBOX.emit(session, agg, "lost", "Happened", {"n": 1})
            session.rollback()
        elif path == "exception":
            with pytest.raises(RuntimeError), session.begin():
                session.execute(insert(business, "lost"))
                OUTBOX.emit(session, agg, "lost", "Happened", {"n": 1})
                raise RuntimeError("the business logic fails after the emit")
        elif path == "savepoint":
            with session.begin():
                session.execute(insert(business, "kept"))
                OUTBOX.emit(session, agg, "kept", "Happened", {"n": 1})
                with pytest.raises(RuntimeError), session.begin_nested():
                    session.execute(insert(business, "lost"))
                    OUTBOX.emit(session, agg, "lost", "Happened", {"n": 2})
                    raise RuntimeError("the nested step fails")
            assert business.committed(admin_conn, "kept") == (1, 1)  # the outer transaction committed
        else:
            session.execute(insert(business, "lost"))
            OUTBOX.emit(session, agg, "lost", "Happened", {"n": 1})  # and the session closes uncommitted
    assert business.committed(admin_conn, "lost") == (0, 0)


@pytest.mark.parametrize("path", ["begin", "commit-as-you-go", "emit-only", "rollback", "exception", "savepoint", "closed"])
def test_connection_commits_or_rolls_back_row_and_event_together(engine: sa.Engine, business: Business, admin_conn: psycopg.Connection,
                                                                 path: str) -> None:
    agg = business.aggregate_type
    kept = path in ("begin", "commit-as-you-go", "emit-only")
    row = "kept" if kept else "lost"
    if path == "begin":
        with engine.begin() as conn:
            conn.execute(insert(business, row))
            OUTBOX.emit(conn, agg, row, "Happened", {"n": 1})
    elif path == "exception":
        with pytest.raises(RuntimeError), engine.begin() as conn:
            conn.execute(insert(business, row))
            OUTBOX.emit(conn, agg, row, "Happened", {"n": 1})
            raise RuntimeError("the business logic fails after the emit")
    else:
        with engine.connect() as conn:
            if path == "commit-as-you-go":
                OUTBOX.emit(conn, agg, row, "Happened", {"n": 1})  # the first statement: it begins the transaction
                conn.execute(insert(business, row))
                conn.commit()
            elif path == "emit-only":
                OUTBOX.emit(conn, agg, row, "Happened", {"n": 1})  # SQLAlchemy sees no statement of its own
                conn.commit()
            elif path == "rollback":
                conn.execute(insert(business, row))
                OUTBOX.emit(conn, agg, row, "Happened", {"n": 1})
                conn.rollback()
            elif path == "savepoint":
                with conn.begin():
                    with pytest.raises(RuntimeError), conn.begin_nested():
                        conn.execute(insert(business, row))
                        OUTBOX.emit(conn, agg, row, "Happened", {"n": 1})
                        raise RuntimeError("the nested step fails")
                    conn.execute(insert(business, "outer"))
                assert business.committed(admin_conn, "outer") == (1, 0)
            else:
                OUTBOX.emit(conn, agg, row, "Happened", {"n": 1})  # closed uncommitted
    assert business.committed(admin_conn, row) == ((0 if path == "emit-only" else 1, 1) if kept else (0, 0))


def test_an_autocommit_engine_is_refused_and_writes_nothing(settings: Settings, business: Business, admin_conn: psycopg.Connection) -> None:
    engine = sa.create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(settings.database_url), isolation_level="AUTOCOMMIT")
    try:
        with Session(engine) as session, session.begin():
            with pytest.raises(NoTransactionError, match="autocommit") as info:
                OUTBOX.emit(session, business.aggregate_type, "lost", "Happened", {"n": 1})
            assert "AUTOCOMMIT" in (info.value.fix or "")
    finally:
        engine.dispose()
    assert business.committed(admin_conn, "lost") == (0, 0)


@pytest.mark.parametrize("path", ["commit", "rollback", "exception", "savepoint"])
def test_async_session_commits_or_rolls_back_row_and_event_together(settings: Settings, business: Business, admin_conn: psycopg.Connection,
                                                                    path: str) -> None:
    agg = business.aggregate_type
    row = "kept" if path == "commit" else "lost"

    async def scenario() -> None:
        engine = make_async_engine(settings)
        try:
            async with AsyncSession(engine) as session:
                if path == "commit":
                    async with session.begin():
                        await session.execute(insert(business, row))
                        await ASYNC_OUTBOX.emit(session, agg, row, "Happened", {"n": 1})
                elif path == "rollback":
                    await session.execute(insert(business, row))
                    await ASYNC_OUTBOX.emit_many(session, [NewEvent(agg, row, "Happened", {"n": 1})])
                    await session.rollback()
                elif path == "exception":
                    with pytest.raises(RuntimeError):
                        async with session.begin():
                            await session.execute(insert(business, row))
                            await ASYNC_OUTBOX.emit(session, agg, row, "Happened", {"n": 1})
                            raise RuntimeError("the business logic fails after the emit")
                else:
                    async with session.begin():
                        with pytest.raises(RuntimeError):
                            async with session.begin_nested():
                                await session.execute(insert(business, row))
                                await ASYNC_OUTBOX.emit(session, agg, row, "Happened", {"n": 1})
                                raise RuntimeError("the nested step fails")
                        await session.execute(insert(business, "outer"))
        finally:
            await engine.dispose()

    asyncio.run(scenario())
    assert business.committed(admin_conn, row) == ((1, 1) if path == "commit" else (0, 0))
    if path == "savepoint":
        assert business.committed(admin_conn, "outer") == (1, 0)


def test_async_connection_commits_as_you_go_and_refuses_autocommit(settings: Settings, business: Business, admin_conn: psycopg.Connection) -> None:
    agg = business.aggregate_type

    async def scenario() -> None:
        engine = make_async_engine(settings)
        autocommit = make_async_engine(settings, isolation_level="AUTOCOMMIT")
        try:
            async with engine.connect() as conn:
                await ASYNC_OUTBOX.emit(conn, agg, "kept", "Happened", {"n": 1})  # SQLAlchemy sees no statement of its own
                await conn.commit()
            async with engine.connect() as conn:
                await ASYNC_OUTBOX.emit(conn, agg, "kept", "Happened", {"n": 2})  # the first statement: it begins the transaction
                await conn.execute(insert(business, "kept"))
                await conn.commit()
            async with engine.begin() as conn:
                await conn.execute(insert(business, "lost"))
                await ASYNC_OUTBOX.emit(conn, agg, "lost", "Happened", {"n": 1})
                await conn.rollback()
            async with autocommit.begin() as conn:
                with pytest.raises(NoTransactionError, match="autocommit"):
                    await ASYNC_OUTBOX.emit(conn, agg, "refused", "Happened", {"n": 1})
        finally:
            await engine.dispose()
            await autocommit.dispose()

    asyncio.run(scenario())
    assert business.committed(admin_conn, "kept") == (1, 2)
    assert business.committed(admin_conn, "lost") == (0, 0)
    assert business.committed(admin_conn, "refused") == (0, 0)


def test_execute_and_emit_runs_in_the_session_transaction(engine: sa.Engine, business: Business, admin_conn: psycopg.Connection) -> None:
    with Session(engine) as session, session.begin():
        cur, _event = OUTBOX.execute_and_emit(session, business.insert_sql() + " RETURNING id", ("kept",),
                                              business.aggregate_type, "kept", "Happened", {"n": 1})
        assert cur.fetchall() == [("kept",)]
    assert business.committed(admin_conn, "kept") == (1, 1)
