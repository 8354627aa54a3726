"""The psycopg 3 connection under Django's database connection.

Only used once :mod:`postbox.outbox.connection_lookup` has seen a Django object; Django itself is
never imported (``django.db.connection`` forwards every attribute to the thread's connection, so
the public attributes used here work on it and on ``connections[alias]`` alike). What the writer
relies on:

* The alias must be PostgreSQL (``vendor``) on psycopg 3 (``connection.connection`` after
  ``ensure_connection()``, psycopg2's connection when only that is installed).
* Django's autocommit mode, outside ``transaction.atomic()``, is psycopg's autocommit: the emit is
  refused there (the INSERT would commit alone), with Django's way to open a transaction.
  Inside ``atomic()`` Django turns autocommit off, so the event commits with the block, and an
  inner ``atomic()`` is a SAVEPOINT on this very connection, which takes the event when it rolls back.
* An atomic block Django has marked for rollback (a caught database error, ``set_rollback(True)``)
  refuses the emit as it refuses any query (``validate_no_broken_transaction``).
"""

from __future__ import annotations

from typing import Any

import psycopg

from postbox.errors import ConnectionTypeError
from postbox.outbox.connection_lookup import describe
from postbox.outbox.transaction_check import require_transaction

ATOMIC_FIX = (
    "emit inside `with transaction.atomic():` (Django's autocommit mode commits every statement on its "
    "own outside one), or turn on ATOMIC_REQUESTS for the view"
)


def sync_connection(obj: Any) -> psycopg.Connection[Any]:
    """The psycopg ``Connection`` under Django's connection ``obj``, inside a transaction."""
    if not (hasattr(obj, "vendor") and hasattr(obj, "ensure_connection")):
        raise ConnectionTypeError(
            f"a Django {type(obj).__name__} is not a database connection (got {describe(obj)})",
            fix="pass django.db.connection (or django.db.connections[alias]) inside `with transaction.atomic():`",
        )
    if obj.vendor != "postgresql":
        raise ConnectionTypeError(
            f"Django database {obj.alias!r} is {obj.vendor}: the outbox is a PostgreSQL table, written in the "
            "PostgreSQL transaction of the business rows",
            fix="emit on the connection of a database whose ENGINE is django.db.backends.postgresql "
            "(django.db.connections[alias])",
        )
    obj.ensure_connection()
    raw = obj.connection
    if not isinstance(raw, psycopg.Connection):
        raise ConnectionTypeError(
            f"Django's PostgreSQL backend runs on {type(raw).__module__.partition('.')[0]} here: postbox sends on psycopg 3",
            fix="install psycopg 3 (`pip install psycopg`): Django 4.2+ uses it instead of psycopg2 when it is installed",
        )
    obj.validate_no_broken_transaction()
    require_transaction(raw, ATOMIC_FIX)
    return raw


def async_refusal(obj: object) -> ConnectionTypeError:
    """Django's connection handed to the asyncio writer: Django's database layer is synchronous."""
    return ConnectionTypeError(
        f"Django's connection is synchronous (got {describe(obj)}), and this is the asyncio writer",
        fix="emit with Outbox (`postbox.outbox.emit(connection, ...)`); from async code, run the whole "
        "transaction.atomic() block, emit included, in one function wrapped with asgiref's sync_to_async",
    )


__all__ = ["ATOMIC_FIX", "async_refusal", "sync_connection"]
