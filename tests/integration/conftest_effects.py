"""Fixtures of the effects tests: postbox's own redis-server processes (import what you use).

The shared stack's Redis (``redis_client`` in tests/conftest.py) cannot be restarted, filled to
maxmemory or turned into a cluster by a test, so these tests start their own servers on free
loopback ports with ``appendonly yes`` / ``appendfsync always`` and stop them afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from postbox.effects import EffectsEngine, EventRef
from tests.support.redis_servers import RedisClusterProcesses, RedisServer

FUNCTIONS_DIR = Path(__file__).parent / "lua_functions"


@pytest.fixture(scope="session")
def own_redis() -> Iterator[RedisServer]:
    """One redis-server for the session (tests isolate by key prefix)."""
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture
def fresh_redis() -> Iterator[RedisServer]:
    """A redis-server of the test's own (restart, maxmemory)."""
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture
def own_client(own_redis: RedisServer) -> Iterator[redis.Redis]:
    client = own_redis.client()
    yield client
    client.close()


@pytest.fixture
def tag() -> str:
    """A fresh hash tag for the test's keys: ``{t<hex>}``."""
    return "{t" + uuid.uuid4().hex[:10] + "}"


def ref(tag: str, event_id: str | None = None) -> EventRef:
    """A fresh event routed by ``tag`` (``{t…}`` or its text): its marker shares the tag's slot."""
    return EventRef(event_id or str(uuid.uuid4()), tag.strip("{}"))


@pytest.fixture
def engine(own_client: redis.Redis) -> EffectsEngine:
    return EffectsEngine(own_client, "g-" + uuid.uuid4().hex[:8], functions_dir=FUNCTIONS_DIR, strict_slots=True)


@pytest.fixture(scope="module")
def redis_cluster() -> Iterator[RedisClusterProcesses]:
    cluster = RedisClusterProcesses().start()
    yield cluster
    cluster.stop()
