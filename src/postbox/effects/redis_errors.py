"""Which Redis failures heal by waiting, for every runtime path that talks to Redis.

Why one place: the effects engine (:meth:`~postbox.effects.engine.EffectsEngine._classify`, the
failure verdicts in markers included) and the failure-stream write
(:meth:`postbox.consumer.deadletter.DeadLetters.record`) must agree on what is retried; each then
words its own message and decides what the rest means for it.
"""

from __future__ import annotations

import redis

from postbox.failure_classes import TRANSIENT_REDIS_CODES, redis_error_code

#: A Redis Cluster that cannot route a call yet: a slot without a master, a failover under way.
CLUSTER_UNSETTLED = (redis.RedisClusterException, redis.exceptions.ClusterError)


def transient_reason(exc: BaseException) -> str | None:
    """The reason to retry ``exc`` later (``connection``, ``LOADING``, ``CLUSTERDOWN`` or a
    transient error code such as ``OOM``), or None when waiting does not fix it."""
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
        return "LOADING" if isinstance(exc, redis.BusyLoadingError) else "connection"
    code = redis_error_code(exc)
    if code in TRANSIENT_REDIS_CODES:
        return code
    if isinstance(exc, CLUSTER_UNSETTLED):
        return "CLUSTERDOWN"
    return None
