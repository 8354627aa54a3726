"""The psycopg 3 connection under what a service holds its transaction on.

Why: a service emits in the transaction it already has, and most hold it through SQLAlchemy or
Django rather than psycopg itself. The writer sends on psycopg 3, so every emit first finds the
psycopg connection under what it was given. The event then commits or rolls back with that
connection's transaction, savepoints included, because it is the very same connection. SQLAlchemy
and Django are optional and never imported here: an object is recognised by the package of its
class or of a base class, and only then is its adapter imported.

The lookup, in order (the first match decides):

1. a psycopg ``Connection`` for the sync writer, an ``AsyncConnection`` for the asyncio one:
   itself (every emit on plain psycopg, or on a connection from a ``psycopg_pool`` pool, stops
   here); the other kind is refused, naming the other writer.
2. the package of the object's class or of a base class:
   ``sqlalchemy`` (:mod:`postbox.outbox.sqlalchemy_adapter`: Session, Connection, AsyncSession,
   AsyncConnection), ``django`` (:mod:`postbox.outbox.django_adapter`: its connection),
   ``psycopg_pool`` (a pool is refused: it is not a transaction), or another driver (psycopg2,
   asyncpg, sqlite3, ...: refused with the way to psycopg 3).
3. anything else: refused, naming what is supported.

Every refusal is a :class:`~postbox.errors.ConnectionTypeError` (a ``TypeError``) raised before
any SQL; the writer plans (checks and encodes the payload) before it looks the connection up.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import psycopg

from postbox.errors import ConnectionTypeError

#: What an emit takes: a psycopg 3 connection, or what a service holds its transaction on
#: (the lookup above). ``object`` for type checkers, since SQLAlchemy and Django are optional.
ServiceConnection: TypeAlias = object

SYNC_SUPPORTED = (
    "a psycopg 3 Connection (also one taken from a psycopg_pool pool), a SQLAlchemy 2 Session or "
    "Connection on the postgresql+psycopg dialect, or Django's connection (django.db.connection, "
    "its PostgreSQL backend on psycopg 3) inside transaction.atomic()"
)
ASYNC_SUPPORTED = (
    "a psycopg 3 AsyncConnection (also one taken from a psycopg_pool AsyncConnectionPool), or a "
    "SQLAlchemy 2 AsyncSession or AsyncConnection on the postgresql+psycopg dialect"
)

_TO_PSYCOPG = (
    "connect with psycopg 3 (`pip install psycopg`, `psycopg.connect(url)`); with SQLAlchemy use the "
    'postgresql+psycopg dialect (`create_engine("postgresql+psycopg://...")`); Django 4.2+ uses '
    "psycopg 3 when it is installed"
)
_TO_ASYNC_PSYCOPG = (
    "use psycopg 3's `await psycopg.AsyncConnection.connect(url)` with AsyncOutbox, or with SQLAlchemy "
    '`create_async_engine("postgresql+psycopg://...")` and emit on the AsyncSession; postbox needs psycopg 3'
)
_TO_POSTGRESQL = (
    "the outbox is a PostgreSQL table, written in the PostgreSQL transaction of the business rows: "
    "emit on that transaction's connection (psycopg 3, SQLAlchemy on postgresql+psycopg, or Django's "
    "PostgreSQL backend)"
)

#: Drivers postbox does not send on: (what it is, how to get to psycopg 3), by top-level package.
OTHER_DRIVERS: dict[str, tuple[str, str]] = {
    "psycopg2": ("a psycopg2 connection: postbox sends on psycopg 3", _TO_PSYCOPG),
    "pg8000": ("a pg8000 connection: postbox sends on psycopg 3", _TO_PSYCOPG),
    "aiopg": ("an aiopg (psycopg2) connection: postbox sends on psycopg 3", _TO_ASYNC_PSYCOPG),
    "asyncpg": ("an asyncpg connection: postbox sends on psycopg 3", _TO_ASYNC_PSYCOPG),
    "sqlite3": ("a SQLite connection: postbox sends on psycopg 3 to PostgreSQL", _TO_POSTGRESQL),
    "aiosqlite": ("a SQLite connection: postbox sends on psycopg 3 to PostgreSQL", _TO_POSTGRESQL),
}

_ADAPTED = ("sqlalchemy", "django", "psycopg_pool")


def sync_connection(conn: ServiceConnection) -> psycopg.Connection[Any]:
    """The psycopg ``Connection`` whose transaction an emit on ``conn`` joins (the lookup above)."""
    if isinstance(conn, psycopg.Connection):
        return conn
    if isinstance(conn, psycopg.AsyncConnection):
        raise ConnectionTypeError(
            "a psycopg AsyncConnection was passed to the synchronous writer",
            fix="emit with AsyncOutbox: `await AsyncOutbox().emit(conn, ...)`",
        )
    package = package_of(conn)
    if package == "sqlalchemy":
        from postbox.outbox import sqlalchemy_adapter

        return sqlalchemy_adapter.sync_connection(conn)
    if package == "django":
        from postbox.outbox import django_adapter

        return django_adapter.sync_connection(conn)
    raise refusal(conn, package, asynchronous=False)


async def async_connection(conn: ServiceConnection) -> psycopg.AsyncConnection[Any]:
    """The psycopg ``AsyncConnection`` whose transaction an emit on ``conn`` joins (the lookup above)."""
    if isinstance(conn, psycopg.AsyncConnection):
        return conn
    if isinstance(conn, psycopg.Connection):
        raise ConnectionTypeError(
            "a synchronous psycopg Connection was passed to the asyncio writer",
            fix="emit with Outbox (`postbox.outbox.emit(conn, ...)`), or connect with psycopg.AsyncConnection",
        )
    package = package_of(conn)
    if package == "sqlalchemy":
        from postbox.outbox import sqlalchemy_adapter

        return await sqlalchemy_adapter.async_connection(conn)
    if package == "django":
        from postbox.outbox import django_adapter

        raise django_adapter.async_refusal(conn)
    raise refusal(conn, package, asynchronous=True)


def psycopg_only(conn: object, *, asynchronous: bool) -> None:
    """Refuse anything but psycopg's own connection for ``transaction(conn)``, which opens a
    transaction itself: a SQLAlchemy session or Django's connection already has one, and the
    writer's block on the connection under it would be invisible to that framework."""
    wanted = psycopg.AsyncConnection if asynchronous else psycopg.Connection
    if isinstance(conn, wanted):
        return
    if package_of(conn) in ("sqlalchemy", "django"):
        verb = "await outbox.emit" if asynchronous else "outbox.emit"
        raise ConnectionTypeError(
            f"transaction() opens a transaction of its own on a psycopg connection; {describe(conn)} already holds one",
            fix=f"emit in that transaction instead: `{verb}(session, ...)` (or the connection) inside your own "
            "session.begin() / engine.begin() / transaction.atomic() block",
        )
    raise refusal(conn, package_of(conn), asynchronous=asynchronous)


def package_of(conn: object) -> str | None:
    """The top-level package, among those the lookup knows, of ``conn``'s class or a base class
    (a service's own subclass of a SQLAlchemy Session is a Session); None for any other object."""
    for cls in type(conn).__mro__:
        top = cls.__module__.partition(".")[0]
        if top in _ADAPTED or top in OTHER_DRIVERS:
            return top
    return None


def describe(conn: object) -> str:
    """``conn``'s class as a user would write it, e.g. ``sqlalchemy.orm.session.Session``."""
    cls = type(conn)
    return f"{cls.__module__}.{cls.__qualname__}"


def refusal(conn: object, package: str | None, *, asynchronous: bool) -> ConnectionTypeError:
    """The error for a pool, another driver, or an object the lookup does not know."""
    if package == "psycopg_pool":
        opener = "async with" if asynchronous else "with"
        verb = "await outbox.emit" if asynchronous else "outbox.emit"
        return ConnectionTypeError(
            f"a psycopg_pool {type(conn).__name__} is a pool, not a transaction: the event must join the "
            "transaction of one connection, the one the business rows are written on",
            fix=f"take a connection from the pool and emit on it: `{opener} pool.connection() as conn:` then "
            f"`{verb}(conn, ...)` next to your statements (the block commits when it ends)",
        )
    if package in OTHER_DRIVERS:
        what, how = OTHER_DRIVERS[package]
        return ConnectionTypeError(f"{what} (got {describe(conn)})", fix=how)
    return ConnectionTypeError(
        f"the outbox writer emits in the transaction of the connection it is given, and cannot use {describe(conn)}",
        fix=f"pass {ASYNC_SUPPORTED if asynchronous else SYNC_SUPPORTED}",
    )


__all__ = ["ServiceConnection", "async_connection", "describe", "package_of", "psycopg_only", "refusal", "sync_connection"]
