"""Is an acknowledged apply durable? The consumer runtime commits Kafka offsets only after it is.

Redis replies to a write before or after writing it to disk depending on configuration:

- ``appendonly yes`` + ``appendfsync always``: the AOF is fsynced before any reply leaves the
  server, so an acknowledged apply survives a crash. → ``method="appendfsync-always"``.
- ``appendonly yes``, ``appendfsync everysec`` and the server has ``WAITAOF`` (Redis 7.2+): the
  engine sends ``WAITAOF 1 0 <timeout>`` right after its script calls on the same connection and
  treats an unconfirmed reply as a transient error. WAITAOF waits for the writes *of its own
  connection* only, so in such calls a duplicate rewrites its marker unchanged (see
  apply_effects.lua): the wait then covers the marker the duplicate relied on, which another
  connection wrote and which may not be on disk yet. → ``method="waitaof"``.
- otherwise (AOF off, or ``everysec``/``no`` on a server without WAITAOF, or CONFIG refused): up
  to about a second of acknowledged applies (or everything since the last RDB save) can be lost in
  a crash, and with them the dedupe markers, so redelivered events would apply twice.
  → ``durable=False``; the runtime warns.
- a ``maxmemory-policy`` that can evict (:mod:`postbox.effects.eviction`) loses markers without
  any crash: → ``durable=False`` with ``eviction`` set, which the engine refuses outright.

WAITAOF is detected by asking the server (``WAITAOF 0 0 0``), not by version number.

Replicas (:mod:`postbox.effects.replicas`): Redis replicates asynchronously, so an apply the
primary acknowledged may not be on any replica yet, and a failover to that replica loses it with
its marker. The verdict says how many replicas each apply must reach (``replicas``: the setting,
or with ``auto`` one when ``INFO replication`` shows a connected replica) and how
(``replicas_fsync``: ``WAITAOF`` where the server has it, their AOF fsynced; else ``WAIT``, in
their memory). :func:`wait_for` turns the verdict into the command sent after each call and the
check of its reply; an unconfirmed wait is a transient error, retried, never committed past.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace
from typing import Literal

import os

import redis

from postbox.effects import replicas as replication
from postbox.effects.eviction import MemoryPolicy, evicting
from postbox.effects.redis_errors import transient_reason
from postbox.effects.replicas import Replicas, Wait

Method = Literal["appendfsync-always", "waitaof", "none"]


@dataclass(frozen=True)
class Durability:
    """What makes an acknowledged apply durable on a server (or on all primaries of a cluster)."""

    durable: bool
    method: Method
    reason: str
    #: The server whose ``maxmemory-policy`` can evict the consumer's keys (then not durable).
    eviction: MemoryPolicy | None = None
    #: Replicas each apply must reach before the runtime commits past it (0: the primary alone).
    replicas: int = 0
    #: The replicas are waited for on disk (``WAITAOF``), not only in memory (``WAIT``).
    replicas_fsync: bool = False

    def __str__(self) -> str:
        text = f"{'durable' if self.durable else 'NOT durable'} ({self.method}): {self.reason}"
        return text + "; " + replication.describe(self.replicas, self.replicas_fsync)

    @property
    def plan(self) -> tuple[bool, Method, int, bool]:
        """What an apply sent under this verdict relied on (compared when the server changes)."""
        return self.durable, self.method, self.replicas, self.replicas_fsync


def wait_for(verdict: Durability, timeout_ms: int) -> Wait | None:
    """The wait that follows each script call under ``verdict`` (None: the reply is enough):
    ``WAITAOF <local> <replicas>`` where the server has WAITAOF, else ``WAIT <replicas>``."""
    return replication.wait_for(local_fsync=verdict.method == "waitaof", replicas=verdict.replicas,
                                fsync=verdict.replicas_fsync, timeout_ms=timeout_ms)


def check_durability(client: "redis.Redis | redis.RedisCluster", *, skip: Collection[str] = (), replicas: Replicas = "auto") -> Durability:
    """Inspect the server(s) behind ``client``: none may evict (``INFO memory``), each must
    persist an acknowledged apply (:func:`check_persistence`), and how many replicas each apply
    must reach (``replicas``: a number, or ``auto`` to follow the topology; see
    :mod:`postbox.effects.replicas`). ``skip``: cluster nodes (by ``host:port``) left out, e.g.
    those known down."""
    try:
        found = evicting(client, skip=skip)
    except redis.ResponseError as exc:
        if transient_reason(exc) is not None:
            raise  # LOADING, BUSY, CLUSTERDOWN: not an answer, the caller asks again
        return Durability(False, "none", f"cannot read the server's maxmemory-policy (INFO memory refused: {exc}); "
                          "assume it may evict the dedupe markers (the consumer's Redis user needs INFO)")
    if found is not None:
        return Durability(False, "none", found.describe(), eviction=found)
    verdict = check_persistence(client, skip=skip)
    count, why = replication.required(client, replicas, skip=skip)
    fsync = count > 0 and (verdict.method == "waitaof" or _waitaof_everywhere(client, skip))
    return replace(verdict, reason=f"{verdict.reason}; {why}", replicas=count, replicas_fsync=fsync)


def check_persistence(client: "redis.Redis | redis.RedisCluster", *, skip: Collection[str] = ()) -> Durability:
    """Whether an acknowledged apply reaches the disk; on a cluster every primary (but ``skip``) must."""
    if isinstance(client, redis.RedisCluster):
        nodes = [n for n in client.get_primaries() if n.name not in skip]
        verdicts = [(n.name, check_server(client.get_redis_connection(n))) for n in nodes]
        for name, verdict in verdicts:
            if not verdict.durable:
                return Durability(False, "none", f"{name}: {verdict.reason}")
        methods = {v.method for _, v in verdicts}
        method: Method = "waitaof" if "waitaof" in methods else "appendfsync-always"
        return Durability(True, method, f"all {len(verdicts)} primaries: " + "; ".join(sorted({v.reason for _, v in verdicts})))
    return check_server(client)


def check_server(client: redis.Redis) -> Durability:
    """Inspect one server (CONFIG GET appendonly/appendfsync, COMMAND INFO WAITAOF)."""
    try:
        config = _decode(client.config_get("append*"))
    except redis.ResponseError as exc:
        declared = declared_appendfsync()
        if not _no_permission(exc) or declared is None:
            return Durability(
                False,
                "none",
                f"cannot read the server's AOF settings (CONFIG GET refused: {exc}); assume acknowledged applies may be lost in a crash"
                + ("" if declared is not None else f" (a user without CONFIG: declare the server's policy in {APPENDFSYNC_ENV})"),
            )
        # An ACL user without CONFIG (postbox.effects.acl): AOF on/off from INFO persistence, the
        # fsync policy as declared by whoever configured the server.
        persistence = _decode(client.info("persistence"))
        config = {"appendonly": "yes" if persistence.get("aof_enabled") == "1" else "no", "appendfsync": declared}
        source = f" (appendfsync as declared by {APPENDFSYNC_ENV}; AOF state from INFO persistence)"
        verdict = _verdict(client, config)
        return Durability(verdict.durable, verdict.method, verdict.reason + source)
    return _verdict(client, config)


#: The fsync policy of a server whose CONFIG the consumer may not read (the local stack sets the
#: server's policy from the same variable, default ``always``).
APPENDFSYNC_ENV = "POSTBOX_REDIS_APPENDFSYNC"


def declared_appendfsync() -> str | None:
    """``POSTBOX_REDIS_APPENDFSYNC`` if set, else None (unknown). The local stack declares its own
    Redis's policy there: `postbox env` prints it, and `postbox consume` on the local stack sets it
    (the library does not look into the stack's state folder)."""
    value = os.environ.get(APPENDFSYNC_ENV, "").strip().lower()
    return value or None


def _verdict(client: redis.Redis, config: dict[str, str]) -> Durability:
    appendonly = config.get("appendonly", "no").lower()
    appendfsync = config.get("appendfsync", "everysec").lower()
    if appendonly != "yes":
        return Durability(
            False,
            "none",
            "appendonly is off: acknowledged applies (and dedupe markers) live only in memory until the next RDB save",
        )
    if appendfsync == "always":
        return Durability(True, "appendfsync-always", "appendonly yes with appendfsync always: the AOF is fsynced before each reply")
    if appendfsync == "no":
        return Durability(
            False,
            "none",
            "appendfsync no: Redis never fsyncs the AOF itself, so WAITAOF would never confirm; set appendfsync always (or everysec with WAITAOF)",
        )
    support = waitaof_support(client)
    if support == "yes":
        return Durability(True, "waitaof", f"appendfsync {appendfsync}; the engine confirms each apply with WAITAOF 1 0")
    version = _decode(client.info("server")).get("redis_version", "?")
    if support == "refused":
        return Durability(
            False,
            "none",
            f"appendfsync {appendfsync}: this server ({version}) has WAITAOF but the consumer's Redis user may not run it (ACL), "
            "so acknowledged applies are not confirmed on disk; add +waitaof to the user's ACL "
            "(postbox.effects.acl.consumer_rules(waitaof=True)), or set appendfsync always",
        )
    return Durability(
        False,
        "none",
        f"appendfsync {appendfsync} and this server ({version}) has no WAITAOF (7.2+): about a second of acknowledged applies can be lost in a crash; set appendfsync always",
    )


def _waitaof_everywhere(client: "redis.Redis | redis.RedisCluster", skip: Collection[str]) -> bool:
    """Whether every primary (but ``skip``) lets this user run WAITAOF: replicas are then waited
    for on disk."""
    if isinstance(client, redis.RedisCluster):
        return all(has_waitaof(client.get_redis_connection(n)) for n in client.get_primaries() if n.name not in skip)
    return has_waitaof(client)


def has_waitaof(client: redis.Redis) -> bool:
    """Whether this client can confirm applies with WAITAOF (:func:`waitaof_support` is ``yes``)."""
    return waitaof_support(client) == "yes"


def waitaof_support(client: redis.Redis) -> Literal["yes", "absent", "refused"]:
    """Whether the server knows WAITAOF and this user may run it: ``WAITAOF 0 0 0`` asks for
    nothing and answers at once where it exists, is an unknown command elsewhere (no
    version-number guessing), and an ACL refusal (``refused``) where the user lacks it."""
    try:
        client.execute_command("WAITAOF", 0, 0, 0)
    except redis.ResponseError as exc:
        if "unknown command" in str(exc).lower():
            return "absent"
        if _no_permission(exc):
            return "refused"
        raise
    return "yes"


def _no_permission(exc: Exception) -> bool:
    """An ACL refusal (redis-py strips the NOPERM code from the message)."""
    return isinstance(exc, redis.exceptions.NoPermissionError) or "NOPERM" in str(exc) or "no permissions" in str(exc)


def _decode(mapping: dict) -> dict[str, str]:
    return {
        (k.decode() if isinstance(k, bytes) else str(k)): (v.decode() if isinstance(v, bytes) else str(v))
        for k, v in mapping.items()
    }
