"""Can Redis evict the consumer's keys? Then exactly once cannot hold, crash or no crash.

Every dedupe marker has a TTL, so a ``volatile-*`` policy evicts the markers first when memory
fills (and the owed verdicts and failure streams with them); a redelivered event whose marker was
evicted is applied again. An ``allkeys-*`` policy evicts the effect keys themselves. Only
``noeviction`` is safe: at ``maxmemory`` Redis then refuses writes (OOM), which the engine retries.

The policy is refused whatever ``maxmemory`` is now, ``0`` (no limit) included: ``CONFIG SET
maxmemory`` (an operator, a managed service resizing a node) starts evicting at once, with no
restart for the consumer to notice, while a policy is something an operator chose on purpose.

It is read from ``INFO memory`` (``maxmemory_policy``), which the consumer's ACL user may run
(it has no CONFIG, see :mod:`postbox.effects.acl`). On a cluster every primary is read.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import redis

from postbox.errors import EffectConfigError

SAFE_POLICY = "noeviction"

FIX = (
    "set maxmemory-policy noeviction on the server (CONFIG SET maxmemory-policy noeviction, and in redis.conf; "
    "on a managed service such as ElastiCache, MemoryDB or Azure Cache, the maxmemory-policy of its parameter "
    "group or configuration), and size maxmemory for the markers (one per event for the marker TTL); then "
    "start the consumer again"
)


@dataclass(frozen=True)
class MemoryPolicy:
    """One server's eviction settings, as ``INFO memory`` reports them."""

    #: ``host:port`` of the server ("" when not known).
    node: str
    policy: str
    #: Bytes; 0 means no limit.
    maxmemory: int

    @property
    def evicts(self) -> bool:
        return self.policy != SAFE_POLICY

    def describe(self) -> str:
        limit = f"maxmemory {self.maxmemory} bytes" if self.maxmemory else "maxmemory 0 (no limit now)"
        where = f"{self.node}: " if self.node else ""
        if not self.evicts:
            return f"{where}maxmemory-policy {self.policy} ({limit}): at the limit writes are refused (OOM, retried), no key is evicted"
        victims = "any key, effect keys included" if self.policy.startswith("allkeys") else "keys with a TTL: every dedupe marker, owed dead-letter verdict and failure stream"
        when = "when memory fills" if self.maxmemory else "as soon as a maxmemory is set (CONFIG SET needs no restart)"
        return (
            f"{where}maxmemory-policy {self.policy} ({limit}) evicts {victims} {when}; an event whose marker is "
            "evicted is applied again when Kafka redelivers it"
        )


def read_policy(client: redis.Redis) -> MemoryPolicy:
    """The eviction settings of the one server behind ``client`` (``INFO memory``)."""
    info = client.info("memory")
    policy = info.get("maxmemory_policy", SAFE_POLICY)
    policy = policy.decode() if isinstance(policy, bytes) else str(policy)
    return MemoryPolicy(_address(client), policy, int(info.get("maxmemory", 0) or 0))


def policies(client: "redis.Redis | redis.RedisCluster", *, skip: Collection[str] = ()) -> list[MemoryPolicy]:
    """The eviction settings of the server, or of every primary of a cluster (but ``skip``)."""
    if isinstance(client, redis.RedisCluster):
        primaries = [n for n in client.get_primaries() if n.name not in skip]  # type: ignore[no-untyped-call]
        return [read_policy(client.get_redis_connection(node)) for node in primaries]
    return [read_policy(client)]


def evicting(client: "redis.Redis | redis.RedisCluster", *, skip: Collection[str] = ()) -> MemoryPolicy | None:
    """The first server (a cluster's primary) whose policy can evict, or None."""
    return next((p for p in policies(client, skip=skip) if p.evicts), None)


def refusal(found: MemoryPolicy) -> EffectConfigError:
    """The error that stops a consumer on a server that can evict (no retry fixes it)."""
    return EffectConfigError(f"Redis can evict the consumer's keys: {found.describe()}", fix=FIX)


def refuse_eviction(client: "redis.Redis | redis.RedisCluster") -> None:
    """Raise :func:`refusal` when any server behind ``client`` can evict."""
    found = evicting(client)
    if found is not None:
        raise refusal(found)


def _address(client: redis.Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    host, port = kwargs.get("host"), kwargs.get("port")
    return f"{host}:{port}" if host else str(kwargs.get("path", ""))


__all__ = ["FIX", "MemoryPolicy", "SAFE_POLICY", "evicting", "policies", "read_policy", "refusal", "refuse_eviction"]
