"""A Redis whose ``maxmemory-policy`` can evict the consumer's keys is refused.

Every dedupe marker carries a TTL, so under a ``volatile-*`` policy the markers are the first keys
Redis evicts when memory fills; a redelivered event whose marker went is applied a second time,
without any crash. Under ``allkeys-*`` the effect keys themselves go. The consumer refuses such a
server at start-up and whenever it re-reads durability, and `postbox doctor` names the policy and
the fix. Before the fix nothing read the policy: an engine on a ``volatile-lru`` server called it
durable and applied, and doctor had no line for it.

Each test runs its own redis-server started with the policy under test.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from postbox.effects import Effects, EffectsEngine, EventRef, aggregate_keys
from postbox.effects.acl import CONSUMER_USER, consumer_rules
from postbox.errors import EffectConfigError
from tests.integration.incident_support import run_cli
from tests.support.cli import invoke
from tests.support.redis_servers import RedisServer

pytestmark = pytest.mark.integration

EVICTING = ("volatile-lru", "allkeys-lru")


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[RedisServer]:
    policy, maxmemory = request.param
    started = RedisServer(config={"maxmemory-policy": policy, "maxmemory": maxmemory}).start()
    yield started
    started.stop()


def _event() -> tuple[EventRef, Effects, str]:
    agg = uuid.uuid4().hex
    key = aggregate_keys("order", agg)("n")
    return EventRef.for_aggregate(str(uuid.uuid4()), "order", agg), Effects().incrby(key, 1), key


@pytest.mark.parametrize("server", [(p, "3mb") for p in EVICTING], indirect=True, ids=EVICTING)
def test_an_evicting_policy_is_refused_before_anything_is_applied(server: RedisServer) -> None:
    client = server.client()
    policy = server.config["maxmemory-policy"]
    engine = EffectsEngine(client, "g-evict", functions_dir=None)
    with pytest.raises(EffectConfigError) as refused:
        engine.durability(refresh=True)
    assert f"maxmemory-policy {policy}" in refused.value.message
    assert refused.value.fix is not None and "maxmemory-policy noeviction" in refused.value.fix
    assert "parameter group" in refused.value.fix  # managed services set it there, not by CONFIG SET
    ref, fx, key = _event()
    with pytest.raises(EffectConfigError):
        EffectsEngine(client, "g-evict", functions_dir=None).apply_one(ref, fx)
    assert client.get(key) is None and not client.exists(engine.marker_key(ref)), "nothing may be applied"
    client.close()


@pytest.mark.parametrize("server", [("noeviction", "3mb")], indirect=True)
def test_a_policy_changed_under_a_running_engine_stops_it_at_the_next_check(server: RedisServer) -> None:
    """The running consumer re-reads durability (here every 0.1 s): the apply after the change
    raises the refusal (the consumer stops, exit 3) and writes nothing."""
    client = server.client()
    engine = EffectsEngine(client, "g-evict", functions_dir=None, durability_refresh_s=0.1)
    ref, fx, key = _event()
    assert engine.apply_one(ref, fx).applied
    client.config_set("maxmemory-policy", "volatile-ttl")
    time.sleep(0.2)
    ref, fx, key = _event()
    with pytest.raises(EffectConfigError, match="maxmemory-policy volatile-ttl"):
        engine.apply_one(ref, fx)
    assert client.get(key) is None and not client.exists(engine.marker_key(ref))
    client.config_set("maxmemory-policy", "noeviction")
    assert engine.apply_one(ref, fx).applied, "fixed on the server: the next check passes"
    client.close()


@pytest.mark.parametrize("server", [("volatile-lru", "0")], indirect=True)
def test_an_evicting_policy_without_a_maxmemory_is_refused_too(server: RedisServer) -> None:
    """``maxmemory 0`` evicts nothing today, but a ``CONFIG SET maxmemory`` (a managed service
    resizing, an operator) starts evicting at once, with no restart for the consumer to notice."""
    client = server.client()
    with pytest.raises(EffectConfigError) as refused:
        EffectsEngine(client, "g-evict", functions_dir=None).durability(refresh=True)
    assert "maxmemory-policy volatile-lru" in refused.value.message and "maxmemory" in refused.value.message
    client.close()


@pytest.mark.parametrize("server", [("noeviction", "3mb")], indirect=True)
def test_noeviction_is_durable_and_applies(server: RedisServer) -> None:
    client = server.client()
    engine = EffectsEngine(client, "g-evict", functions_dir=None)
    assert engine.durability(refresh=True).durable
    ref, fx, key = _event()
    assert engine.apply_one(ref, fx).applied and client.get(key) == b"1"
    client.close()


@pytest.mark.parametrize("server", [("volatile-lru", "3mb")], indirect=True)
def test_the_consumer_acl_user_reads_the_policy_without_config(server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped consumer user has no CONFIG; INFO memory carries the policy all the same."""
    monkeypatch.setenv("POSTBOX_REDIS_APPENDFSYNC", "always")
    admin = server.client()
    admin.execute_command("ACL", "SETUSER", CONSUMER_USER, "on", ">pw", *consumer_rules())
    consumer = redis.Redis(host="127.0.0.1", port=server.port, username=CONSUMER_USER, password="pw")
    with pytest.raises(redis.exceptions.NoPermissionError):
        consumer.config_get("maxmemory-policy")
    with pytest.raises(EffectConfigError) as refused:
        EffectsEngine(consumer, "g-evict", functions_dir=None).durability(refresh=True)
    assert "maxmemory-policy volatile-lru" in refused.value.message
    admin.config_set("maxmemory-policy", "noeviction")
    assert EffectsEngine(consumer, "g-evict", functions_dir=None).durability(refresh=True).durable
    consumer.close()
    admin.close()


@pytest.mark.parametrize("server", [("allkeys-lru", "3mb")], indirect=True)
def test_doctor_reports_the_policy_with_the_fix(server: RedisServer) -> None:
    _code, out = invoke("doctor", "--redis-url", server.url, "--json")
    checks = {c["check"]: c for c in json.loads(out)["checks"]}
    eviction = checks["redis eviction"]
    assert eviction["status"] == "fail", eviction
    assert "maxmemory-policy allkeys-lru" in eviction["detail"], eviction
    assert "maxmemory-policy noeviction" in eviction["fix"], eviction
    admin = server.client()
    admin.config_set("maxmemory-policy", "noeviction")
    admin.close()
    _code, out = invoke("doctor", "--redis-url", server.url, "--json")
    eviction = {c["check"]: c for c in json.loads(out)["checks"]}["redis eviction"]
    assert eviction["status"] == "ok" and "noeviction" in eviction["detail"], eviction


@pytest.mark.parametrize("server", [("volatile-lru", "3mb")], indirect=True)
def test_postbox_consume_refuses_to_start(server: RedisServer) -> None:
    """Refused even with --require-durable false: eviction loses markers without any crash."""
    done = run_cli("consume", "tests.apps.counting:strict", "--group", "evict-probe", "--topics", "outbox.event.evictprobe",
                   "--kafka-bootstrap", "127.0.0.1:1", "--redis-url", server.url, "--metrics-port", "0",
                   "--require-durable", "false", timeout=60)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "maxmemory-policy volatile-lru" in out and "maxmemory-policy noeviction" in out, out
    assert "Traceback" not in out, out
