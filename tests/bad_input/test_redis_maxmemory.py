"""Redis at maxmemory with noeviction: OOM is transient. The consumer retries, dead-letters nothing,
commits nothing past the refused batch, and once memory is freed every event is applied exactly
once, in order. (A private redis-server: the stack's must not be filled up.)"""

from __future__ import annotations

import pytest
import redis

from postbox.consumer import ConsumerConfig
from tests.apps.counting import app
from tests.support.consumers import ThreadedRuntime, committed, create_topic, json_event, produce, wait_for
from tests.support.redis_servers import RedisServer

pytestmark = pytest.mark.integration
EVENTS = 60


def test_oom_is_retried_not_dead_lettered_and_nothing_is_lost_once_memory_is_freed(settings, unique):
    server = RedisServer(config={"maxmemory": "3mb", "maxmemory-policy": "noeviction"}).start()
    admin = redis.Redis.from_url(server.url)
    agg = f"oom{unique}"
    topic = f"outbox.event.{agg}"
    group = f"test-oom-{unique}"
    try:
        create_topic(settings.kafka_bootstrap, topic, partitions=1)
        filled = 0
        for i in range(10_000):  # bounded: fill until Redis refuses writes
            try:
                admin.set(f"filler:{i}", b"x" * 65536)
                filled += 1
            except redis.ResponseError as exc:
                assert isinstance(exc, redis.exceptions.OutOfMemoryError) or str(exc).startswith("OOM"), exc
                break
        else:
            pytest.fail("Redis never reached maxmemory")
        produce(settings.kafka_bootstrap, topic, [json_event(agg, "a", "Counted", s) for s in range(EVENTS)])
        config = ConsumerConfig.load(group=group, topics=topic, redis_url=server.url, batch_wait_ms=50,
                                     backoff_base_ms=100, backoff_max_ms=500)
        runtime = ThreadedRuntime(app, config).start()
        try:
            m = runtime.metrics
            wait_for(lambda: runtime.ok() and m.total("postbox_consumer_retries_total") >= 3, 60, "three OOM retries")
            assert m.value("postbox_consumer_retries_total", reason="OOM") >= 3
            assert m.total("postbox_consumer_dead_lettered_total") == 0
            assert m.total("postbox_consumer_events_applied_total") == 0
            assert committed(settings.kafka_bootstrap, group, topic, 1)[0] <= 0  # nothing committed past the first record
            assert admin.llen(f"{{{agg}:a}}:seq") == 0

            admin.delete(*[f"filler:{i}" for i in range(filled)])  # memory freed
            wait_for(lambda: runtime.ok() and committed(settings.kafka_bootstrap, group, topic, 1) == {0: EVENTS}, 60,
                     "every event applied and committed after memory was freed")
        finally:
            runtime.stop()
        assert [int(x) for x in admin.lrange(f"{{{agg}:a}}:seq", 0, -1)] == list(range(EVENTS))
        assert m.total("postbox_consumer_dead_lettered_total") == 0
        print(f"\nOOM: {int(m.value('postbox_consumer_retries_total', reason='OOM'))} retries, 0 dead letters, {EVENTS} applied once after memory was freed")
    finally:
        admin.close()
        server.stop()
