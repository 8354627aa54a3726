"""The psycopg 3 connection under a SQLAlchemy 2 Session or Connection (sync or asyncio).

Only imported once :mod:`postbox.outbox.connection_lookup` has seen a SQLAlchemy object, so
SQLAlchemy is importable. What the writer relies on:

* A ``Session`` (or ``scoped_session``) hands over its ``Connection`` with ``session.connection()``,
  which begins the session's transaction if it has none (SQLAlchemy's autobegin), so the session's
  ``commit()`` / ``rollback()`` end the event's transaction too.
* A ``Connection`` that has not begun a transaction is begun, as SQLAlchemy's own first
  ``execute()`` would: without it, ``conn.commit()`` would find no transaction to commit, and the
  pool's reset on return would roll the event back silently.
* The driver connection must be psycopg 3's (the ``postgresql+psycopg`` dialect). An engine in
  AUTOCOMMIT is refused like an autocommit psycopg connection: the INSERT would commit alone.
* Savepoints (``begin_nested()``) are SQLAlchemy's SAVEPOINT statements on this very connection,
  so rolling one back takes the event with it.

The asyncio objects live in ``sqlalchemy.ext.asyncio``; they are told apart by that module name,
so the sync path never imports it.
"""

from __future__ import annotations

from typing import Any

import psycopg

from postbox.errors import ConnectionTypeError
from postbox.outbox.connection_lookup import describe
from postbox.outbox.transaction_check import require_transaction

AUTOCOMMIT_FIX = (
    "this SQLAlchemy engine or connection runs with isolation_level='AUTOCOMMIT', so every statement "
    "commits on its own: emit on an engine without it (the default), or give the unit of work its own "
    "connection, e.g. `engine.connect().execution_options(isolation_level='READ COMMITTED')`"
)

_DIALECT_FIX_SYNC = 'create the engine with the psycopg 3 dialect: `create_engine("postgresql+psycopg://...")`'
_DIALECT_FIX_ASYNC = 'create the engine with the psycopg 3 dialect: `create_async_engine("postgresql+psycopg://...")`'


def is_asyncio(obj: object) -> bool:
    """Whether ``obj``'s class (or a base) is one of SQLAlchemy's asyncio wrappers."""
    return any(cls.__module__.startswith("sqlalchemy.ext.asyncio") for cls in type(obj).__mro__)


def sync_connection(obj: object) -> psycopg.Connection[Any]:
    """The psycopg ``Connection`` under a SQLAlchemy ``Session`` or ``Connection``, in a transaction."""
    if is_asyncio(obj):
        raise ConnectionTypeError(
            f"a SQLAlchemy asyncio {type(obj).__name__} was passed to the synchronous writer",
            fix="emit with AsyncOutbox: `await AsyncOutbox().emit(session, ...)`",
        )
    from sqlalchemy.engine import Connection
    from sqlalchemy.orm import Session, scoped_session

    if isinstance(obj, (Session, scoped_session)):
        obj = obj.connection()
    if not isinstance(obj, Connection):
        raise not_a_transaction(obj, asynchronous=False)
    if not obj.in_transaction():
        obj.begin()
    raw = obj.connection.driver_connection
    if not isinstance(raw, psycopg.Connection):
        raise wrong_dialect(obj, _DIALECT_FIX_SYNC)
    require_transaction(raw, AUTOCOMMIT_FIX)
    return raw


async def async_connection(obj: object) -> psycopg.AsyncConnection[Any]:
    """The psycopg ``AsyncConnection`` under a SQLAlchemy ``AsyncSession`` or ``AsyncConnection``."""
    if not is_asyncio(obj):
        from sqlalchemy.engine import Connection
        from sqlalchemy.orm import Session, scoped_session

        if isinstance(obj, (Session, scoped_session, Connection)):
            raise ConnectionTypeError(
                f"a synchronous SQLAlchemy {type(obj).__name__} was passed to the asyncio writer",
                fix="emit with Outbox (`postbox.outbox.emit(session, ...)`), or use an AsyncSession with AsyncOutbox",
            )
        raise not_a_transaction(obj, asynchronous=True)
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_scoped_session

    if isinstance(obj, (AsyncSession, async_scoped_session)):
        obj = await obj.connection()
    if not isinstance(obj, AsyncConnection):
        raise not_a_transaction(obj, asynchronous=True)
    if not obj.in_transaction():
        await obj.begin()
    raw = (await obj.get_raw_connection()).driver_connection
    if not isinstance(raw, psycopg.AsyncConnection):
        raise wrong_dialect(obj, _DIALECT_FIX_ASYNC)
    require_transaction(raw, AUTOCOMMIT_FIX)
    return raw


def not_a_transaction(obj: object, *, asynchronous: bool) -> ConnectionTypeError:
    """An Engine, a sessionmaker or any other SQLAlchemy object that is not a unit of work."""
    if asynchronous:
        way = ("`async with engine.begin() as conn:` then `await outbox.emit(conn, ...)`, or "
               "`async with AsyncSession(engine) as session, session.begin():` then `await outbox.emit(session, ...)`")
    else:
        way = ("`with engine.begin() as conn:` then `outbox.emit(conn, ...)`, or "
               "`with Session(engine) as session, session.begin():` then `outbox.emit(session, ...)`")
    return ConnectionTypeError(
        f"a SQLAlchemy {type(obj).__name__} is not a transaction (got {describe(obj)}): the event must join "
        "the transaction the business rows are written in",
        fix=f"emit on the Session or Connection of that transaction: {way}",
    )


def wrong_dialect(conn: Any, fix: str) -> ConnectionTypeError:
    """A SQLAlchemy connection whose driver is not psycopg 3."""
    dialect = conn.dialect
    return ConnectionTypeError(
        f"a SQLAlchemy connection on the {dialect.name}+{dialect.driver} dialect: postbox sends on psycopg 3 to PostgreSQL",
        fix=fix,
    )


__all__ = ["AUTOCOMMIT_FIX", "async_connection", "is_asyncio", "not_a_transaction", "sync_connection", "wrong_dialect"]
