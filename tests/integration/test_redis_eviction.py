"""A Redis that can evict keys loses dedupe markers in normal operation, not only in a crash: every
marker has a TTL, so under ``volatile-*`` (the default of the large managed offerings) markers are
the first keys evicted once memory is full, and under ``allkeys-*`` the effect keys go too. A
redelivered event whose marker was evicted is applied again. The durability verdict now reads
``maxmemory_policy`` from ``INFO memory`` (readable without CONFIG): only ``noeviction`` is
durable; the consumer refuses to start on such a Redis (``--require-durable``, the default) and
doctor fails the check with the fix. Private redis-servers with the managed services' settings."""

from __future__ import annotations

import pytest

from postbox.effects.durability import check_durability
from postbox.incident.doctor import _redis
from postbox.settings import Settings
from postbox.testing.server import RedisServer
from tests.integration.incident_support import run_cli

pytestmark = pytest.mark.integration


@pytest.fixture(params=["volatile-lru", "allkeys-lru", "volatile-ttl", "allkeys-random"])
def evicting(request):
    with RedisServer(config={"maxmemory": "64mb", "maxmemory-policy": request.param}) as server:
        yield request.param, server


def test_an_evicting_policy_is_not_durable_and_says_why(evicting):
    policy, server = evicting
    with server.client() as client:
        verdict = check_durability(client)
    assert not verdict.durable and verdict.evicting
    assert f"maxmemory-policy {policy}" in verdict.reason and "marker" in verdict.reason
    assert "maxmemory-policy noeviction" in (verdict.fix or "")


def test_noeviction_is_durable_whatever_maxmemory():
    with RedisServer(config={"maxmemory": "64mb", "maxmemory-policy": "noeviction"}) as server, server.client() as client:
        verdict = check_durability(client)
    assert verdict.durable and not verdict.evicting


def test_the_policy_is_read_without_config(evicting):
    """The consumer's ACL user has no CONFIG: INFO memory still shows the policy."""
    policy, server = evicting
    with server.client() as admin:
        admin.execute_command("ACL", "SETUSER", "consumer", "on", ">pw", "~*", "+@all", "-config")
    with server.client(username="consumer", password="pw") as client:
        verdict = check_durability(client)
    assert not verdict.durable and f"maxmemory-policy {policy}" in verdict.reason


def test_the_consumer_refuses_to_start_on_an_evicting_redis(settings, unique):
    with RedisServer(config={"maxmemory": "64mb", "maxmemory-policy": "volatile-lru"}) as server:
        done = run_cli("consume", "tests.apps.counting:app", "--group", f"evict-{unique}", "--topics", f"outbox.event.evict{unique}",
                       "--redis-url", server.url, "--kafka-bootstrap", settings.kafka_bootstrap, timeout=60)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "maxmemory-policy volatile-lru" in done.stderr and "fix:" in done.stderr
    assert "maxmemory-policy noeviction" in done.stderr


def test_doctor_fails_an_evicting_redis_with_the_fix():
    with RedisServer(config={"maxmemory": "64mb", "maxmemory-policy": "allkeys-lru"}) as server:
        checks = {c.name: c for c in _redis(Settings(redis_url=server.url))}
    persistence = checks["redis persistence"]
    assert persistence.status == "fail" and "maxmemory-policy allkeys-lru" in persistence.detail
    assert "maxmemory-policy noeviction" in (persistence.fix or "")


def test_a_running_consumer_holds_its_commits_once_the_policy_can_evict(settings, unique):
    """The policy changed at run time (an operator, a managed service's parameter group): the next
    durability verdict sees it and nothing more is committed, even with --require-durable false;
    back to noeviction, the held records are committed, each event applied once."""
    from postbox.consumer import ConsumerConfig
    from postbox.effects import EffectsEngine
    from tests.apps import documented
    from tests.support.consumers import ThreadedRuntime, committed, create_topic, json_event, produce, wait_for

    agg = f"evict{unique}"
    topic, group = f"outbox.event.{agg}", f"test-evict-{unique}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    with RedisServer() as server, server.client() as admin:
        config = ConsumerConfig.load(group=group, topics=topic, redis_url=server.url, batch_wait_ms=20, backoff_base_ms=100,
                                     backoff_max_ms=500, require_durable="false")  # fmt: skip
        runtime = ThreadedRuntime(documented.app, config)
        runtime.runtime.engine = EffectsEngine(runtime.runtime.redis, group, marker_ttl=config.marker_ttl,
                                               durability_refresh_s=0.2)  # the verdict re-read at once, not after a minute
        runtime.start()
        seq = lambda: [int(x) for x in admin.lrange(f"{{{agg}:a1}}:seq", 0, -1)]  # noqa: E731
        try:
            produce(settings.kafka_bootstrap, topic, [json_event(agg, "a1", "Counted", i, partition=0) for i in range(3)])
            wait_for(lambda: runtime.ok() and committed(settings.kafka_bootstrap, group, topic, 1) == {0: 3}, 60, "3 committed")

            admin.config_set("maxmemory-policy", "volatile-lru")
            produce(settings.kafka_bootstrap, topic, [json_event(agg, "a1", "Counted", i, partition=0) for i in range(3, 6)])
            retries = lambda: runtime.metrics.value("postbox_consumer_retries_total", reason="not-durable")  # noqa: E731
            wait_for(lambda: runtime.ok() and retries() >= 2, 60, "not-durable retries")
            assert committed(settings.kafka_bootstrap, group, topic, 1) == {0: 3}, "committed on an evicting Redis"

            admin.config_set("maxmemory-policy", "noeviction")
            wait_for(lambda: runtime.ok() and committed(settings.kafka_bootstrap, group, topic, 1) == {0: 6}, 60, "6 committed")
            assert seq() == list(range(6))
            assert runtime.stop() == 0
        finally:
            if runtime.thread.is_alive():
                runtime.runtime.stop()
                runtime.thread.join(30)
