"""The writer's own cursor on a connection: one per connection, made once, used by every emit.

Why: ``conn.execute`` makes a new cursor per call, and a new cursor makes two psycopg
``Transformer`` objects and looks up and instantiates a dumper for each parameter again; a cursor
that executes the same query object again keeps its Transformer and its dumpers. Measured in
pipeline mode (psycopg 3.3.9, the C implementation): 17.6 µs of client CPU per INSERT through
``conn.execute`` against 9.9 µs through one reused cursor, hot loop.

Why a plain ``psycopg.Cursor`` and not ``conn.cursor()``: the statements use ``%s``/``%b``
placeholders and server-side parameters, whatever cursor class the caller configured
(``cursor_factory``): a connection made with ``cursor_factory=psycopg.RawCursor`` sent
``VALUES (%b, ...)`` to the server, a syntax error that aborted the caller's transaction. Its
results are never read: an emit returns its :class:`~postbox.outbox.rows.EmittedEvent`, and a
caller who wants a cursor (``execute_and_emit``) gets one of its own.

The cursor is kept on the connection itself (an attribute), so it lives exactly as long as the
connection. A cache keyed by the connection (a ``WeakKeyDictionary``) would keep every connection
alive for ever, since the cursor refers to its connection; the attribute makes a reference cycle
instead, which Python's garbage collector frees: a connection that is ``close()``d (a ``with``
block, a pool) closes its socket at once as before; one dropped without ``close()`` (psycopg warns
about that) is freed by the next full collection rather than at once.

It alone knows how to send the batch INSERT's prebuilt arrays (:mod:`postbox.outbox.binary_arrays`):
their dumpers are registered on it, not on the caller's connection.

One cursor for all threads and tasks on a connection: the writer's sends on a connection run one
after the other under its send lock, pipelined or not (:mod:`postbox.outbox.shared_connection`,
which also says what it cannot see: a ``conn.pipeline()`` the caller shares).
"""

from __future__ import annotations

from typing import Any

import psycopg

from postbox.outbox.binary_arrays import register_on

#: The attribute holding the cursor (one name: a connection is either sync or async).
_ATTRIBUTE = "_postbox_emit_cursor"


def emit_cursor(conn: psycopg.Connection[Any]) -> psycopg.Cursor[Any]:
    """The writer's cursor on ``conn`` (made at the first emit, again if it was closed)."""
    cur = conn.__dict__.get(_ATTRIBUTE)
    if cur is None or cur.closed:
        cur = psycopg.Cursor(conn)
        register_on(cur)
        setattr(conn, _ATTRIBUTE, cur)
    return cur


def async_emit_cursor(conn: psycopg.AsyncConnection[Any]) -> psycopg.AsyncCursor[Any]:
    """The writer's cursor on the asyncio connection ``conn`` (as :func:`emit_cursor`)."""
    cur = conn.__dict__.get(_ATTRIBUTE)
    if cur is None or cur.closed:
        cur = psycopg.AsyncCursor(conn)
        register_on(cur)
        setattr(conn, _ATTRIBUTE, cur)
    return cur


__all__ = ["async_emit_cursor", "emit_cursor"]
