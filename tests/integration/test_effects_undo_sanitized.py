"""The undo's DUMP/RESTORE under ``sanitize-dump-payload yes`` (what the project's Redis configs
now set): an event deleting and overwriting keys of every type, then failing, leaves each key as
it was — RESTORE of the script's own DUMPs passes the server's deep payload check."""

from __future__ import annotations

import uuid

import pytest
import redis

from postbox.effects import Effects, EffectsEngine, EventRef
from tests.support.redis_servers import RedisServer

pytestmark = pytest.mark.integration


def _snapshot(client: redis.Redis, keys: list[str]) -> dict[str, object]:
    return {
        keys[0]: client.hgetall(keys[0]), keys[1]: client.lrange(keys[1], 0, -1),
        keys[2]: client.zrange(keys[2], 0, -1, withscores=True), keys[3]: client.smembers(keys[3]),
        keys[4]: client.xrange(keys[4]), keys[5]: client.get(keys[5]),
    }  # fmt: skip


def test_a_failed_events_undo_restores_every_type_with_sanitize_on() -> None:
    with RedisServer(config={"sanitize-dump-payload": "yes"}) as server, server.client() as client:
        assert client.config_get("sanitize-dump-payload") == {"sanitize-dump-payload": "yes"}
        t = uuid.uuid4().hex[:8]
        keys = [f"{{u:{t}}}:{kind}" for kind in ("hash", "list", "zset", "set", "stream", "string")]
        client.hset(keys[0], mapping={f"f{i}": "v" * i for i in range(200)})  # listpack and hashtable encodings
        client.rpush(keys[1], *[str(i) * 50 for i in range(300)])
        client.zadd(keys[2], {f"m{i}": i / 3 for i in range(150)})
        client.sadd(keys[3], *range(600))
        for i in range(20):
            client.xadd(keys[4], {"n": i})
        client.set(keys[5], "before", px=600_000)
        before = _snapshot(client, keys)
        client.set(f"{{u:{t}}}:not-a-hash", "x")
        fx = Effects().delete(*keys[:5]).set(keys[5], "after").hset(f"{{u:{t}}}:not-a-hash", "f", "v")  # fails: WRONGTYPE
        result = EffectsEngine(client, "g-" + t, functions_dir=None).apply_one(EventRef.for_aggregate("e1", "u", t), fx)
        assert result.failed and "WRONGTYPE" in (result.error or "") and not result.undo_error, result
        assert _snapshot(client, keys) == before
        assert 590_000 < client.pttl(keys[5]) <= 600_000
