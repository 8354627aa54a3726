"""Refuse an emit that would commit on its own.

Why: the outbox pattern's one promise is "no event without its commit, no commit without its
event". On an autocommit connection outside a transaction block, the INSERT commits the moment it
runs, alone: if the business statements after it fail (or ran before it, already committed), the
event and the business change no longer commit or roll back together. psycopg makes this easy to
do by accident (``autocommit=True`` is common in pools and async code), so the writer checks the
connection before it sends anything.

A connection with autocommit off is always fine: psycopg opens a transaction before the first
statement and the caller's ``commit()`` ends it. With autocommit on, the INSERT is accepted only
inside a transaction block: ``conn.transaction()`` (psycopg's own, also when pipelined) or an
explicit ``BEGIN``.
"""

from __future__ import annotations

from typing import Any

from psycopg.pq import TransactionStatus

from postbox.errors import NoTransactionError


def in_transaction_block(conn: Any) -> bool:
    """Whether an INSERT sent now on ``conn`` commits only with the caller's transaction.

    ``conn`` is a psycopg ``Connection`` or ``AsyncConnection`` (both expose the same state).
    In pipeline mode libpq reports ACTIVE while statements are queued, which says nothing about a
    transaction block; psycopg's own count of open ``transaction()`` blocks does, so it decides
    there (without a round trip, which would cost what pipelining saves).
    """
    if not conn.autocommit:
        return True
    status = conn.info.transaction_status
    if status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
        return True
    if status == TransactionStatus.ACTIVE:
        return bool(getattr(conn, "_num_transactions", 0))
    return False


#: The fix on plain psycopg; the framework adapters (:mod:`postbox.outbox.connection_lookup`) name their own.
PSYCOPG_FIX = (
    "emit inside `with conn.transaction():` (or `async with conn.transaction():`), use "
    "`outbox.transaction()`, or open the connection with autocommit=False and commit yourself"
)


def require_transaction(conn: Any, fix: str = PSYCOPG_FIX) -> None:
    """Raise :class:`NoTransactionError` unless an emit on ``conn`` joins a caller's transaction;
    ``fix`` says how to open one with what the caller holds (psycopg, SQLAlchemy, Django)."""
    if in_transaction_block(conn):
        return
    raise NoTransactionError(
        "emit on an autocommit connection outside a transaction block: the event would commit on "
        "its own, apart from the business change it belongs to (nothing was written)",
        fix=fix,
    )


__all__ = ["PSYCOPG_FIX", "in_transaction_block", "require_transaction"]
