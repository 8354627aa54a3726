"""The group registry: the engine publishes its group's marker TTL when it loads (what
`postbox doctor` checks against how long Kafka can redeliver), as the stack's ACL user."""

from __future__ import annotations

from datetime import timedelta

import pytest
import redis

from postbox.effects import EffectConfigError, EffectsEngine
from postbox.effects import groups

pytestmark = pytest.mark.integration


def test_load_publishes_the_marker_ttl_as_the_consumer_user(settings, redis_client, unique) -> None:
    assert "postbox_consumer:" in settings.redis_url, "the stack's POSTBOX_REDIS_URL should be the ACL user"
    consumer = redis.Redis.from_url(settings.redis_url)
    group = f"billing:{unique}"
    try:
        EffectsEngine(consumer, group, functions_dir=None, marker_ttl=timedelta(days=9, hours=1)).load()
        published = groups.read(redis_client)[group]  # read back by the admin, as doctor does
        assert published.marker_ttl == timedelta(days=9, hours=1) and published.updated_at is not None
        EffectsEngine(consumer, group, functions_dir=None, marker_ttl=timedelta(hours=1)).load()
        assert groups.read(redis_client)[group].marker_ttl == timedelta(hours=1)  # a restart with a new TTL
    finally:
        redis_client.hdel(groups.registry_key(), group)
        consumer.close()


def test_a_registry_key_of_another_type_is_a_configuration_error(redis_client, unique) -> None:
    namespace = f"postbox:ns{unique}"
    redis_client.set(groups.registry_key(namespace), "not a hash")
    try:
        with pytest.raises(EffectConfigError, match="group registry"):
            EffectsEngine(redis_client, "g", functions_dir=None, namespace=namespace).load()
    finally:
        redis_client.delete(groups.registry_key(namespace))


def test_a_full_redis_delays_the_registry_entry_not_the_start() -> None:
    """The entry is advisory: under maxmemory + noeviction load() still succeeds (the consumer
    starts and retries its applies as OOM), and the entry is written after the first apply."""
    from postbox.effects import Effects, EventRef
    from tests.support.redis_servers import RedisServer

    server = RedisServer().start()
    client = server.client()
    try:
        engine = EffectsEngine(client, "billing", functions_dir=None)
        engine.load(publish=False)
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("maxmemory", str(int(client.info("memory")["used_memory"]) - 64 * 1024))
        engine.load()  # no exception: the entry is pending
        assert groups.read(client) == {}
        client.config_set("maxmemory", "0")
        assert engine.apply_one(EventRef("e1", "order:1"), Effects().incrby("{order:1}:n", 1)).applied
        assert groups.read(client)["billing"].marker_ttl == timedelta(days=8)
    finally:
        client.close()
        server.stop()
