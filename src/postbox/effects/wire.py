"""Send the engine's commands to one Redis node as packed RESP, on a connection of its pool.

Why not ``client.evalsha`` / ``client.pipeline()``: redis-py packs every command through
``HiredisRespSerializer.pack``, which runs a Python generator over the arguments before handing
them to hiredis (~100 ns per argument); an apply call carries ~6 arguments per event, so
packing cost ~1.1 µs per event of GIL-holding time in the apply worker (500-event calls, one
HINCRBY each), time the consumer's loop thread waits for. Here the whole round (``ASKING``, the
EVALSHA calls, ``WAITAOF``) is packed by :func:`pack` (~0.3 µs per such event) and written at once.

What stays redis-py's: the connection pool, connecting and its health check
(``send_packed_command``), the reply parser and its error classes (``read_response``: NOSCRIPT,
MOVED, ASK, BUSY, ... come back as the same exception types), and the client's retry policy
(``conn.retry``: a connection error or timeout disconnects, then resends the round, as
redis-py's own pipeline does — safe, because an event whose call ran comes back a duplicate).
What is not: redis-py's per-command observability hooks (OpenTelemetry command metrics) do not
see these calls.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import hiredis
import redis
from redis.exceptions import ResponseError

#: One command: its name and arguments. A command of ``bytes`` only (what the engine sends) is
#: packed by :func:`pack` itself; one with a str or int argument by ``hiredis.pack_command``.
Command = tuple[bytes | str | int, ...]
#: ``$<length>`` of a RESP bulk string, for the lengths most arguments have.
_BULK_HEADS = [b"$%d" % n for n in range(1024)]


def pack(command: Command) -> bytes:
    """The RESP form of ``command`` (an array of bulk strings), the same bytes as
    ``hiredis.pack_command``. Every part is placed by C code (a list comprehension of the length
    heads, two slice assignments and one ``join``): ~0.33 against hiredis's ~0.58 µs per
    one-HINCRBY event (6 arguments), whose C packer costs ~100 ns per argument."""
    parts: list[Any] = [b""] * (2 * len(command) + 2)
    parts[0] = b"*%d" % len(command)
    try:
        try:
            parts[1:-1:2] = [_BULK_HEADS[len(arg)] for arg in command]  # type: ignore[arg-type]  # an int raises TypeError: hiredis packs it
        except IndexError:  # an argument of 1 KiB or more
            parts[1:-1:2] = [b"$%d" % len(arg) for arg in command]  # type: ignore[arg-type]  # as above
        parts[2:-1:2] = command
        return b"\r\n".join(parts)  # the empty last part ends the last argument with CRLF
    except TypeError:  # a str or int argument (join and len take bytes only): hiredis encodes it
        packed: bytes = hiredis.pack_command(command)  # type: ignore[arg-type]  # hiredis's stub types the tuple as of one item; it takes any length
        return packed


def round_trip(client: redis.Redis, commands: Sequence[Command], watch: Callable[[Any], None] | None = None) -> list[Any]:
    """Send ``commands`` in one write and read one reply per command, in order. An error reply
    comes back as its exception object (like ``pipeline.execute(raise_on_error=False)``) after
    every reply was read, so the connection stays in step; a connection error or timeout raises
    (``redis.ConnectionError`` / ``redis.TimeoutError``) once the client's retries are spent.
    ``watch`` is given the connection before anything is sent on it (the engine notes which
    server it reached: :mod:`postbox.effects.server_watch`)."""
    packed = [pack(command) for command in commands]
    if len(packed) > 1:
        packed = [b"".join(packed)]  # one write for the round (a lone call is not copied again)
    pool = client.connection_pool
    own = client.connection  # a single-connection client: its one connection, under its lock
    conn: Any = own or pool.get_connection()  # redis-py's Connection methods are untyped
    if own is not None:
        client.single_connection_lock.acquire()
    try:
        if watch is not None:
            watch(conn)
        replies: list[Any] = conn.retry.call_with_retry(lambda: _exchange(conn, packed, len(commands)), lambda _error: conn.disconnect())
        return replies
    finally:
        if conn.should_reconnect():  # the server announced maintenance: reconnect before next use, as redis-py does
            conn.disconnect()
        if own is not None:
            client.single_connection_lock.release()
        else:
            pool.release(conn)


def _exchange(conn: Any, packed: list[bytes], count: int) -> list[Any]:
    conn.send_packed_command(packed)
    replies: list[Any] = []
    for _ in range(count):
        try:
            replies.append(conn.read_response())
        except ResponseError as exc:
            replies.append(exc)
    return replies
