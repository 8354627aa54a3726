"""Whether reconcile may call an absent marker evicted: read from a real redis-server's INFO.

``evicted_keys`` counts since the server's start whatever the policy is now; with none counted,
a policy that can evict still leaves absent markers unproven when the server started after the
window began (evictions before its start are not counted).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from postbox.incident.reconcile_read import eviction
from postbox.testing.server import RedisServer


def test_a_redis_that_cannot_evict_and_did_not_gives_no_reason() -> None:
    with RedisServer() as server:
        client = server.client()
        assert eviction(client, datetime.now(timezone.utc) - timedelta(hours=1)) is None


def test_a_policy_that_can_evict_on_a_server_started_inside_the_window_is_a_reason() -> None:
    with RedisServer(config={"maxmemory-policy": "volatile-lru"}) as server:
        client = server.client()
        now = datetime.now(timezone.utc)
        reason = eviction(client, now - timedelta(hours=1), now)
        assert reason is not None and "maxmemory-policy volatile-lru" in reason and "evictions before its start are not counted" in reason
