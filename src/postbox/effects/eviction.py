"""Can this Redis evict keys? An evicted dedupe marker lets a redelivered event apply again.

Eviction loses acknowledged state in normal operation, not only in a crash: once ``maxmemory``
is reached, ``volatile-*`` policies (the default of the large managed offerings) evict keys that
have a TTL — every dedupe marker, owed verdict and failure stream has one, so they go first —
and ``allkeys-*`` policies evict any key, the effect keys included. Only ``noeviction`` keeps
them: Redis refuses writes instead (an error the engine retries, never a silent loss).

The policy is read from ``INFO memory`` (``maxmemory_policy``), which the consumer's ACL user may
run without CONFIG. A policy other than ``noeviction`` is refused whatever ``maxmemory`` says
today: ``maxmemory 0`` (no limit) does not evict, but a managed service or an operator can set a
limit at run time without a restart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SAFE_POLICY = "noeviction"
FIX = ("set maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction, and in redis.conf; on a managed "
       "Redis, in its parameter group) and give maxmemory room for the markers (docs/effects.md, Durability)")  # fmt: skip


@dataclass(frozen=True)
class Eviction:
    """A server's eviction setting, as ``INFO memory`` reports it."""

    policy: str
    maxmemory: int

    @property
    def evicts(self) -> bool:
        return self.policy != SAFE_POLICY

    @property
    def reason(self) -> str:
        limit = f"maxmemory {self.maxmemory:,} bytes" if self.maxmemory else "maxmemory 0 today (it can be set at run time)"
        victims = ("keys with a TTL first: every dedupe marker, owed verdict and failure stream" if self.policy.startswith("volatile")
                   else "any key: dedupe markers and the effect keys themselves")  # fmt: skip
        return (f"maxmemory-policy {self.policy} ({limit}): when memory is full Redis evicts {victims}, "
                "and an event whose marker was evicted is applied again when it is redelivered")


def read_eviction(client: Any) -> Eviction:
    """The eviction setting of the server behind ``client`` (one server, not a cluster)."""
    memory = client.info("memory")
    policy = memory.get("maxmemory_policy", SAFE_POLICY)
    policy = policy.decode() if isinstance(policy, bytes) else str(policy)
    return Eviction(policy=policy, maxmemory=int(memory.get("maxmemory", 0) or 0))
