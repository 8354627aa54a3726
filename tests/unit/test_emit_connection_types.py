"""What the writer says when it is handed something that is not a psycopg 3 transaction.

A service passes what it holds its transaction on. Anything postbox cannot send on (another
driver, SQLite, a pool, an engine, the wrong writer for sync/async, an arbitrary object) is refused
with a ``TypeError`` naming what it got and how to get to a supported connection; before this, a
SQLAlchemy session or a psycopg2 connection failed with a bare ``AttributeError`` ('... has no
attribute autocommit'). The payload is still checked first: a bad payload on an object that would
be refused raises the payload's error, and a SQLAlchemy session is not even begun.

No database here: the refused objects are real (sqlite3, SQLAlchemy on SQLite, psycopg_pool pools
not opened, Django's SQLite alias) or stand-ins for drivers that are not installed (psycopg2,
asyncpg), recognised like the real ones by the package of their class.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
from psycopg_pool import AsyncConnectionPool, ConnectionPool
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session, sessionmaker

from postbox.errors import PayloadError
from postbox.outbox import AsyncOutbox, NewEvent, Outbox
from tests.support.django_project import django_connections

SYNC = Outbox(encoding="json")
ASYNC = AsyncOutbox(encoding="json")
GOOD = {"n": 1}


def _emit(conn: Any) -> Any:
    return SYNC.emit(conn, "t", "a", "Happened", GOOD)


def _emit_many(conn: Any) -> Any:
    return SYNC.emit_many(conn, [NewEvent("t", "a", "Happened", GOOD)])


def _execute_and_emit(conn: Any) -> Any:
    return SYNC.execute_and_emit(conn, "SELECT 1", None, "t", "a", "Happened", GOOD)


def _async_emit(conn: Any) -> Any:
    return asyncio.run(ASYNC.emit(conn, "t", "a", "Happened", GOOD))


def _async_emit_many(conn: Any) -> Any:
    return asyncio.run(ASYNC.emit_many(conn, [NewEvent("t", "a", "Happened", GOOD)]))


def _async_execute_and_emit(conn: Any) -> Any:
    return asyncio.run(ASYNC.execute_and_emit(conn, "SELECT 1", None, "t", "a", "Happened", GOOD))


SYNC_CALLS = [_emit, _emit_many, _execute_and_emit]
ASYNC_CALLS = [_async_emit, _async_emit_many, _async_execute_and_emit]
EVERY_CALL = SYNC_CALLS + ASYNC_CALLS


def stand_in(module: str, name: str) -> object:
    """An object whose class comes from ``module`` (a driver that is not installed here)."""
    return type(name, (), {"__module__": module})()


def refusal(call: Callable[[Any], Any], conn: object) -> TypeError:
    with pytest.raises(TypeError) as info:
        call(conn)
    return info.value


@pytest.mark.parametrize("call", EVERY_CALL)
@pytest.mark.parametrize(("conn", "named", "way"), [
    (stand_in("psycopg2.extensions", "connection"), "psycopg2", "postgresql+psycopg"),
    (stand_in("asyncpg.connection", "Connection"), "asyncpg", "postgresql+psycopg"),
    (stand_in("pg8000.legacy", "Connection"), "pg8000", "psycopg.connect"),
    (sqlite3.connect(":memory:"), "SQLite", "PostgreSQL"),
], ids=["psycopg2", "asyncpg", "pg8000", "sqlite3"])
def test_another_driver_is_refused_with_the_way_to_psycopg_3(call: Callable[[Any], Any], conn: object, named: str, way: str) -> None:
    error = refusal(call, conn)
    assert named in str(error) and way in str(error), str(error)
    assert "psycopg 3" in str(error)


def test_a_subclass_of_a_driver_class_is_recognised_by_its_base() -> None:
    base = type("connection", (), {"__module__": "psycopg2.extensions"})
    mine = type("AppConnection", (base,), {"__module__": "myservice.db"})()
    assert "psycopg2" in str(refusal(_emit, mine))


@pytest.mark.parametrize("call", EVERY_CALL)
@pytest.mark.parametrize("conn", [object(), None, "postgresql://app@db/shop"], ids=["object", "None", "url"])
def test_an_unknown_object_is_refused_naming_what_is_supported(call: Callable[[Any], Any], conn: object) -> None:
    error = str(refusal(call, conn))
    assert type(conn).__name__ in error
    for supported in ("psycopg", "SQLAlchemy", "postgresql+psycopg"):
        assert supported in error, error
    if call in SYNC_CALLS:
        assert "Django" in error and "Session" in error, error
    else:
        assert "AsyncSession" in error and "AsyncConnection" in error, error


@pytest.mark.parametrize("call", SYNC_CALLS)
def test_a_pool_is_not_a_transaction(call: Callable[[Any], Any]) -> None:
    pool = ConnectionPool("", open=False)
    error = str(refusal(call, pool))
    assert "ConnectionPool" in error and "with pool.connection() as conn:" in error, error


@pytest.mark.parametrize("call", ASYNC_CALLS)
def test_an_async_pool_is_not_a_transaction(call: Callable[[Any], Any]) -> None:
    async def made_in_a_loop() -> AsyncConnectionPool:
        return AsyncConnectionPool("", open=False)

    error = str(refusal(call, asyncio.run(made_in_a_loop())))
    assert "AsyncConnectionPool" in error and "async with pool.connection() as conn:" in error, error


@pytest.mark.parametrize("call", EVERY_CALL)
def test_sqlalchemy_on_another_dialect_names_the_dialect_to_use(call: Callable[[Any], Any]) -> None:
    engine = sa.create_engine("sqlite://")
    with Session(engine) as session:
        error = str(refusal(call, session))
    if call in SYNC_CALLS:
        assert "sqlite+pysqlite" in error and 'create_engine("postgresql+psycopg://' in error, error
    else:
        assert "synchronous" in error and "Outbox" in error, error  # the async writer refuses a sync Session first
    with engine.connect() as conn:
        assert "sqlite+pysqlite" in str(refusal(_emit, conn))
    engine.dispose()


def test_sqlalchemy_engine_and_sessionmaker_are_not_transactions() -> None:
    engine = sa.create_engine("sqlite://")
    assert "with engine.begin() as conn:" in str(refusal(_emit, engine))
    assert "session.begin()" in str(refusal(_emit, sessionmaker(engine)))
    aengine = create_async_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")
    assert "async with engine.begin() as conn:" in str(refusal(_async_emit, aengine))


def test_sqlalchemy_async_objects_need_the_async_writer_and_sync_ones_the_sync_writer() -> None:
    aengine = create_async_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")
    error = str(refusal(_emit, AsyncSession(aengine)))
    assert "AsyncSession" in error and "AsyncOutbox" in error, error
    with Session(sa.create_engine("sqlite://")) as session:
        error = str(refusal(_async_emit, session))
    assert "Session" in error and "postbox.outbox.emit" in error, error


def test_a_bad_payload_is_refused_first_and_the_session_is_not_begun() -> None:
    with Session(sa.create_engine("sqlite://")) as session:
        with pytest.raises(PayloadError):
            SYNC.emit(session, "t", "", "Happened", GOOD)  # an empty aggregate_id
        assert not session.in_transaction()
    with pytest.raises(PayloadError):
        SYNC.emit(sqlite3.connect(":memory:"), "t", "", "Happened", GOOD)


def test_django_on_sqlite_is_refused_and_django_needs_the_sync_writer() -> None:
    connections = django_connections()
    error = str(refusal(_emit, connections["lite"]))
    assert "'lite'" in error and "sqlite" in error and "PostgreSQL" in error, error
    error = str(refusal(_async_emit, connections["default"]))
    assert "Django" in error and "synchronous" in error and "sync_to_async" in error, error


def test_transaction_takes_psycopg_only_and_says_where_to_emit_instead() -> None:
    with Session(sa.create_engine("sqlite://")) as session:
        with pytest.raises(TypeError, match=r"outbox\.emit\(session"):
            with SYNC.transaction(session):  # type: ignore[arg-type]
                pass

    async def async_block() -> None:
        async with ASYNC.transaction(AsyncSession(create_async_engine("postgresql+psycopg://nobody@127.0.0.1:1/none"))):  # type: ignore[arg-type]
            pass

    with pytest.raises(TypeError, match=r"emit\(session"):
        asyncio.run(async_block())
