"""Notice when the Redis server behind the engine's connections may have changed.

A durability verdict holds for the server it was read on. A server restarted on the same address
with other settings, a DNS name or VIP moved to another server, a failover: redis-py reconnects by
itself (inside one command, under its retry policy), and a cached verdict would go on calling
applies durable on a server nobody checked. So every connection the engine sends on is watched:
when it connects (the first time the engine sees it, then on every reconnect, through redis-py's
connect callbacks) it reads the ``run_id`` of the server it reached (``INFO server``: a new id at
every server start) and compares it with the ids the verdict was read on. An id not among them
marks the verdict stale; the engine reads durability again before anything sent on such a
connection is reported applied. A connection found on another server *before* anything was
sent on it (it reconnected when taken from the pool: the common case after a failover) is
:attr:`ServerWatch.elsewhere`: the engine then sends nothing on it under the old verdict, reads
the verdict again and sends under that one — the old verdict's wait (for a replica the promoted
server may not have) would only time out.

A server whose ``INFO`` the consumer may not run cannot be told apart: its connections mark
nothing (its durability check cannot read ``INFO memory`` either, so it is not durable anyway).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Collection
from typing import Any

import redis


class ServerWatch:
    """The run ids the current verdict was read on, and whether a connection reached another."""

    def __init__(self) -> None:
        self._seen: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self._lock = threading.Lock()
        self._known: frozenset[str] = frozenset()
        self._stale = False
        self._elsewhere = False
        #: Counts the changes seen: an apply compares it before and after (another thread, the
        #: health probe, may take the stale flag and re-read the verdict meanwhile).
        self.changes = 0

    def watch(self, conn: Any) -> None:
        """Watch ``conn`` (a connected redis-py connection about to be sent on); cheap once seen."""
        if conn in self._seen:
            return
        with self._lock:
            if conn in self._seen:
                return
            self._seen.add(conn)
        conn.register_connect_callback(self._connected)
        self._connected(conn)  # it connected before the engine saw it

    def known(self, run_ids: Collection[str]) -> None:
        """The servers a fresh verdict is being read on (their ids read before the verdict)."""
        with self._lock:
            self._known = frozenset(run_ids)

    @property
    def elsewhere(self) -> bool:
        """A connection reached a server whose run id the verdict was not read on (not merely a
        refreshed slot map), and no verdict has been read since."""
        return self._elsewhere

    @property
    def stale(self) -> bool:
        """A connection reached a server the verdict was not read on (or the slot map changed)."""
        return self._stale

    def settle(self, changes: int) -> None:
        """A verdict read from when :attr:`changes` was ``changes`` is stored: not stale, unless
        another change came in while it was read (a failed read settles nothing)."""
        with self._lock:
            if self.changes == changes:
                self._stale = self._elsewhere = False

    def mark_stale(self) -> None:
        """The servers may have changed (a cluster's slot map was refreshed)."""
        with self._lock:
            self._stale = True
            self.changes += 1

    def _connected(self, conn: Any) -> None:
        run_id = read_run_id(conn)
        if run_id is not None and run_id not in self._known:
            with self._lock:
                self._elsewhere = True
            self.mark_stale()


def read_run_id(conn: Any) -> str | None:
    """The ``run_id`` of the server ``conn`` is connected to; None when INFO is refused. A lost
    connection or a timeout disconnects it and raises: a half-read reply must never be taken
    for the next command's."""
    try:
        conn.send_command("INFO", "server")
        reply = conn.read_response()
    except redis.ResponseError:
        return None
    except (redis.ConnectionError, redis.TimeoutError):
        conn.disconnect()
        raise
    return parse_run_id(reply)


def parse_run_id(info: Any) -> str | None:
    """``run_id`` out of an ``INFO server`` reply (raw text, or a dict redis-py parsed)."""
    if isinstance(info, dict):
        value = info.get("run_id")
        return None if value is None else str(value.decode() if isinstance(value, bytes) else value)
    text = info.decode("utf-8", "replace") if isinstance(info, bytes) else str(info)
    for line in text.splitlines():
        if line.startswith("run_id:"):
            return line.split(":", 1)[1].strip()
    return None


def run_ids(client: "redis.Redis | redis.RedisCluster", skip: Collection[str] = ()) -> set[str]:
    """The run ids of the server, or of a cluster's primaries (but those named in ``skip``)."""
    if isinstance(client, redis.RedisCluster):
        primaries = [n for n in client.get_primaries() if n.name not in skip]  # type: ignore[no-untyped-call]
        found = {parse_run_id(client.get_redis_connection(n).info("server")) for n in primaries}
    else:
        found = {parse_run_id(client.info("server"))}
    return {run_id for run_id in found if run_id is not None}


__all__ = ["ServerWatch", "parse_run_id", "read_run_id", "run_ids"]
