"""How many replicas an apply must reach before it counts as durable, and the wait that checks it.

Redis replicates asynchronously: the primary acknowledges a write before any replica has it, so a
failover to a replica that missed an acknowledged apply loses it with its dedupe marker (the
offset is committed, the effect is gone). After its script calls the engine therefore sends, on
the same connection, one wait (:func:`wait_for`):

- ``WAITAOF <local> <n> <timeout>`` where the server has WAITAOF (Redis 7.2+): the apply is in the
  AOF of ``n`` replicas, fsynced (a replica with ``appendonly no`` never confirms), and with
  ``local`` 1 (``appendfsync everysec``) in the primary's too;
- else ``WAIT <n> <timeout>``: the apply is in the memory of ``n`` replicas.

Both cover the writes of their own connection only; a duplicate rewrites its marker unchanged
(apply_effects.lua), so the wait covers the marker it relied on, which another connection wrote.
A reply below what was asked is a :class:`~postbox.errors.TransientEffectError`: the batch is
retried (what landed comes back as duplicates), never committed past.

How many (:func:`required`): the ``--redis-replicas`` setting (``POSTBOX_REDIS_REPLICAS``), a
number or ``auto``: one when the primary has a connected replica (``INFO replication``'s
``connected_slaves``), none when it has none, read again with the rest of the durability verdict.
On a cluster ``auto`` counts the primary with the fewest replicas.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import redis

from postbox.errors import TransientEffectError

AUTO = "auto"
#: A number of replicas, or ``auto`` (follow the topology).
Replicas = int | Literal["auto"]
ENV = "POSTBOX_REDIS_REPLICAS"
FLAG = "--redis-replicas"
#: Highest number accepted: more replicas than any deployment waits for is a typo.
MAX_REPLICAS = 16


def parse(raw: Any) -> Replicas:
    """``auto`` or a whole number from 0 to :data:`MAX_REPLICAS`; ValueError otherwise."""
    if isinstance(raw, bool):
        raise ValueError("not a number of replicas")
    if isinstance(raw, int):
        count = raw
    else:
        text = str(raw).strip().lower()
        if text == AUTO:
            return AUTO
        if not text.isdigit():
            raise ValueError(f"{raw!r} is neither 'auto' nor a whole number")
        count = int(text)
    if not 0 <= count <= MAX_REPLICAS:
        raise ValueError(f"{count} is not from 0 to {MAX_REPLICAS}")
    return count


def required(client: "redis.Redis | redis.RedisCluster", setting: Replicas, *, skip: Collection[str] = ()) -> tuple[int, str]:
    """How many replicas each apply waits for under ``setting``, and why (for the verdict's reason)."""
    connected = connected_replicas(client, skip)
    seen = "INFO replication refused" if connected is None else f"{connected} replica{_s(connected)} connected"
    if setting != AUTO:
        return setting, f"{FLAG} {setting} ({seen})"
    if connected is None:
        return 0, f"{seen}, so {FLAG} auto waits for no replica (set {FLAG} to the number to wait for)"
    return min(connected, 1), f"{seen} ({FLAG} auto)"


def connected_replicas(client: "redis.Redis | redis.RedisCluster", skip: Collection[str] = ()) -> int | None:
    """``connected_slaves`` of the server (on a cluster: the fewest of any primary but ``skip``);
    None when the user may not run INFO."""
    try:
        if isinstance(client, redis.RedisCluster):
            primaries = [client.get_redis_connection(n) for n in client.get_primaries() if n.name not in skip]
            return min((_connected(p) for p in primaries), default=0)
        return _connected(client)
    except redis.exceptions.NoPermissionError:
        return None


def _connected(client: redis.Redis) -> int:
    info = client.info("replication")
    return int(info.get("connected_slaves", info.get(b"connected_slaves", 0)))


def describe(replicas: int, fsync: bool) -> str:
    """The replica part of a verdict, in words."""
    if not replicas:
        return "no replica waited for"
    how = "WAITAOF: in their AOF, fsynced" if fsync else "WAIT: in their memory"
    return f"each apply waits for {replicas} replica{_s(replicas)} ({how})"


@dataclass(frozen=True, slots=True)
class Wait:
    """The commands sent after a round of script calls, and the check of their replies."""

    commands: tuple[tuple[bytes, ...], ...]
    local: bool
    replicas: int
    fsync: bool
    timeout_ms: int

    def check(self, replies: Sequence[Any]) -> None:
        """Raise :class:`TransientEffectError` unless ``replies`` (one per command, in order)
        confirm what was asked; an error reply raises as itself."""
        for reply in replies:
            if isinstance(reply, BaseException):
                raise reply
        if self.fsync or self.local:  # WAITAOF, last: [local fsyncs, replica fsyncs]
            local, acked = (int(replies[-1][0]), int(replies[-1][1])) if replies[-1] else (0, 0)
        else:  # WAIT: the replicas that acknowledged
            local, acked = 1, int(replies[-1])
        if self.local and local < 1:
            raise TransientEffectError(
                f"WAITAOF did not confirm the local AOF fsync within {self.timeout_ms} ms",
                reason="waitaof",
                fix="check the Redis host's disk; the batch is applied but not known durable, so it is retried",
            )
        if acked < self.replicas:
            raise TransientEffectError(
                f"{acked} of {self.replicas} replica{_s(self.replicas)} confirmed the apply within {self.timeout_ms} ms "
                f"({'WAITAOF: fsynced to their AOF' if self.fsync else 'WAIT: received'})",
                reason="replicas",
                fix="a replica is down, lagging or disconnected (INFO replication: connected_slaves, lag)"
                + (", or runs with appendonly off (it never confirms WAITAOF)" if self.fsync else "")
                + "; the batch is applied on the primary but not known to survive a failover, so it is retried. "
                f"Bring the replica back, or lower {FLAG} / {ENV} (0: the primary alone, which a failover can lose)",
            )


def wait_for(*, local_fsync: bool, replicas: int, fsync: bool, timeout_ms: int) -> Wait | None:
    """The wait for the local fsync (``local_fsync``: WAITAOF under ``everysec``) and for
    ``replicas`` replicas (``fsync``: on disk with WAITAOF, which ``local_fsync`` implies); None
    when nothing is waited for.

    On disk, ``WAIT`` goes first: a replica answers the primary's request for its offsets with
    the fsynced offset it had *before* the request's batch, so a WAITAOF sent right behind the
    writes would be confirmed only by the replica's next periodic acknowledgement (once a
    second). Once WAIT saw the writes arrive, the replica has fsynced them (``appendfsync
    always``) and the WAITAOF after it is answered at once."""
    if not local_fsync and not replicas:
        return None
    timeout = str(timeout_ms).encode()
    count = str(replicas).encode()
    if not (local_fsync or fsync):
        return Wait(((b"WAIT", count, timeout),), False, replicas, False, timeout_ms)
    waitaof = (b"WAITAOF", b"1" if local_fsync else b"0", count, timeout)
    commands = ((b"WAIT", count, timeout), waitaof) if replicas else (waitaof,)
    return Wait(commands, local_fsync, replicas, True, timeout_ms)


def _s(count: int) -> str:
    return "" if count == 1 else "s"


__all__ = ["AUTO", "ENV", "FLAG", "MAX_REPLICAS", "Replicas", "Wait", "connected_replicas", "describe", "parse", "required", "wait_for"]
