"""One connection used by several threads or asyncio tasks: the writer's sends never interleave,
and an ``outbox.transaction()`` block is refused to everyone but its own code.

Why: psycopg serializes single statements on a shared connection (its connection lock), but not
a pipeline. The writer puts the connection in pipeline mode for a send of several statements
(``emit_many`` over several chunks, every emit under the ``delete`` retention) and for
``transaction()``. Two threads or tasks doing that on one connection at once failed inside
psycopg (``AssertionError``, ``PIPELINE_SYNC``, ``OutOfOrderTransactionNesting``) and, with
asyncio and the ``delete`` retention, hung for ever (found in review, 2026-12-01).

The rules, kept per connection by a :class:`ConnectionGuard` stored on the connection itself
(like the writer's cursor, :mod:`postbox.outbox.emit_cursor`: it lives as long as the connection):

* Every send (``emit``, ``emit_many``, ``execute_and_emit``) holds the guard's lock from its
  first statement to its last: sends from several threads (a ``threading.Lock``) or tasks (an
  ``asyncio.Lock``) on one connection run one after the other, whatever the retention, as
  single statements always did under psycopg's lock. No user code runs under the lock, so
  waiting for it is bounded by the other send's round trip; but an async block's own
  ``tx.execute`` runs its statement under it, so that tasks the block creates take turns with
  its emits (a sync block's ``tx.execute`` is only checked: no other thread may use the block).
* A ``transaction()`` block owns its connection while it is open: an emit, another
  ``transaction()``, or the block's own handle's ``execute`` (the handle handed to a thread or a
  task started outside the block) on that connection from code outside the block raises at once
  (before waiting for the lock)
  :class:`~postbox.errors.SharedConnectionError` before any SQL. Waiting instead would wait on
  user code (a deadlock if the block waits for the refused thread), and the event would join,
  and commit or roll back with, someone else's transaction. "Inside the block" is the block's
  context (a ``ContextVar``): the code in it, and asyncio tasks created in it (which copy the
  context, so ``asyncio.gather(tx.emit(...), tx.emit(...))`` works and is serialized), but not a
  thread started in it (a thread starts with an empty context).

What this cannot see: a ``conn.pipeline()`` or ``conn.transaction()`` the caller opens with
psycopg itself, then shares with another thread or task. That is psycopg's contract (its
pipeline is not thread-safe): give each thread or task its own connection, e.g. from a
``psycopg_pool`` pool.

Cost: a send takes one more lock, uncontended in the common case: 0.3 µs of client CPU per send
with the guard's lookup (``threading.Lock``, hot loop on a real connection, load ~6) and 0.6-0.8 µs
with ``asyncio.Lock``. Whole emits, old and new side by side in one process (``time.process_time``,
alternated blocks of pipelined emits, JSON payloads, 75-110 µs of client CPU per emit at load 6-12)
did not settle it: 30 blocks of 2,000 gave sync +2.2 µs, async +6.0 µs (an A/A run of the same
code: -0.3 and +1.7 µs); 10 blocks of 10,000 gave +1.4 / -14.6 µs and +6.8 / +3.5 µs. A cheaper
async turn (no ``asyncio.Lock`` when uncontended) is the first thing to try if it shows.
"""

from __future__ import annotations

import asyncio
import threading
from contextvars import ContextVar
from typing import Any, Generic, TypeVar

from postbox.errors import SharedConnectionError

#: The attribute holding a connection's guard (one name: a connection is either sync or async).
_ATTRIBUTE = "_postbox_guard"

#: The writer transactions whose block the running code is in (innermost last).
_open_blocks: ContextVar[tuple[object, ...]] = ContextVar("postbox_open_transactions", default=())


LockT = TypeVar("LockT")


class ConnectionGuard(Generic[LockT]):
    """One connection's send lock and the ``transaction()`` block that owns it, if any."""

    __slots__ = ("lock", "owner")

    def __init__(self, lock: LockT) -> None:
        self.lock = lock
        #: the token of the open ``transaction()`` block, None outside one (read under ``lock``)
        self.owner: object | None = None

    def check(self) -> None:
        """Raise unless the running code may send on the connection (call it holding ``lock``)."""
        if self.owner is not None and self.owner not in _open_blocks.get():
            raise SharedConnectionError(
                "this connection is inside an outbox transaction() block opened by another thread or "
                "asyncio task: an event sent now would join, and commit or roll back with, that block's "
                "transaction, and psycopg's pipeline mode cannot be shared (nothing was sent)",
                fix="give each thread or task its own connection (e.g. from a psycopg_pool "
                "ConnectionPool or AsyncConnectionPool), or emit from inside the block that opened the "
                "transaction",
            )

    def refuse_outsider(self) -> None:
        """:meth:`check`, at the cost of one attribute read when no block is open. Every send calls
        it twice: before taking ``lock``, so code outside an open block is refused at once rather
        than after waiting for the lock, which a statement of the block can hold for as long as the
        database makes it wait (on a row lock the refused code's own transaction may hold: a wait
        no database could see); then holding ``lock``, where it decides."""
        if self.owner is not None:
            self.check()

    def enter_block(self) -> tuple[object | None, Any]:
        """Make the running code's new ``transaction()`` block the owner (call it holding ``lock``);
        returns what :meth:`leave_block` restores."""
        self.check()
        token = object()
        previous = self.owner
        self.owner = token
        return previous, _open_blocks.set((*_open_blocks.get(), token))

    def leave_block(self, entered: tuple[object | None, Any]) -> None:
        """Give the connection back to the owner before the block (no lock: one assignment, and
        taking the lock here could be cancelled, which would leave the connection owned for ever)."""
        previous, context_token = entered
        self.owner = previous
        _open_blocks.reset(context_token)


def guard(conn: Any) -> ConnectionGuard[threading.Lock]:
    """The guard of the psycopg ``Connection`` ``conn`` (made at its first send)."""
    found: ConnectionGuard[threading.Lock] | None = conn.__dict__.get(_ATTRIBUTE)
    if found is None:  # setdefault: two threads' first sends get the same guard
        found = conn.__dict__.setdefault(_ATTRIBUTE, ConnectionGuard(threading.Lock()))
    return found


def async_guard(conn: Any) -> ConnectionGuard[asyncio.Lock]:
    """The guard of the psycopg ``AsyncConnection`` ``conn`` (its lock is an ``asyncio.Lock``)."""
    found: ConnectionGuard[asyncio.Lock] | None = conn.__dict__.get(_ATTRIBUTE)
    if found is None:
        found = conn.__dict__.setdefault(_ATTRIBUTE, ConnectionGuard(asyncio.Lock()))
    return found


__all__ = ["ConnectionGuard", "async_guard", "guard"]
