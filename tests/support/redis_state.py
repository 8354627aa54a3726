"""What a Redis key holds, in a form two keys can be compared by (the effects property tests compare
a key the engine wrote with the same key written by plain redis-py commands)."""

from __future__ import annotations

import redis


def key_value(client: redis.Redis, key: str, kind: str) -> object:
    """The value of ``key`` of type ``kind`` (``client.type``'s answer, decoded), order-free where
    Redis keeps no order (hash fields, set members). Streams are the caller's: what counts of a
    stream (its entries, ids, counters) depends on the comparison."""
    if kind == "string":
        return client.get(key)
    if kind == "hash":
        return sorted(client.hgetall(key).items())
    if kind == "set":
        return sorted(client.smembers(key))
    if kind == "zset":
        return client.zrange(key, 0, -1, withscores=True)
    if kind == "list":
        return client.lrange(key, 0, -1)
    raise ValueError(f"key_value: {key!r} is a {kind}: read it in the test")
