"""Replicas count in durability: an apply is confirmed on as many replicas as configured before
the runtime may commit past it (``WAIT``, or ``WAITAOF`` where the server has it), and an
unconfirmed wait is a transient error — retried, never committed past.

A primary and a replica, private processes (tests/support/replicated_redis.py). The replica is
held back with SIGSTOP: it reads nothing, so a wait for it can only time out, as it does when a
replica is down or lagging. Without the replica wait, an apply acknowledged by the primary alone
is committed, and a failover to that replica loses it (tests/faults/test_redis_failover.py shows
it end to end).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
import redis

from postbox.effects import Effects, EffectsEngine, EventRef, TransientEffectError, aggregate_keys
from tests.support.redis_servers import RedisServer, waitaof_binary
from tests.support.replicated_redis import Topology

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def replicated() -> Iterator[Topology]:
    with Topology(sentinels=0) as topology:
        yield topology


def engine_on(server: RedisServer, group: str, **options: object) -> tuple[EffectsEngine, redis.Redis]:
    """An engine on its own connection (one consumer process), waits cut to 300 ms."""
    client = server.client(single_connection_client=True)
    engine = EffectsEngine(client, group, functions_dir=None, waitaof_timeout=timedelta(milliseconds=300), **options)  # type: ignore[arg-type]
    return engine, client


def event(agg: str) -> tuple[EventRef, Effects]:
    return EventRef.for_aggregate(str(uuid.uuid4()), "order", agg), Effects().incrby(aggregate_keys("order", agg)("n"), 1)


def test_an_apply_the_replica_has_not_acknowledged_is_transient(replicated: Topology) -> None:
    """Default (``auto``): a primary with a connected replica waits for one. With the replica held
    back the apply is applied on the primary but not confirmed: TransientEffectError, so the
    runtime retries instead of committing; once the replica is back the retry is a duplicate,
    confirmed. Before: the apply was acknowledged by the primary alone and reported applied."""
    engine, client = engine_on(replicated.primary, "g-" + uuid.uuid4().hex[:6])
    agg = uuid.uuid4().hex
    assert engine.apply([event(agg)])[0].applied
    ref, fx = event(agg)
    replicated.pause(replicated.replicas[0])
    try:
        with pytest.raises(TransientEffectError) as unconfirmed:
            engine.apply([(ref, fx)])
    finally:
        replicated.resume(replicated.replicas[0])
    assert unconfirmed.value.reason == "replicas"
    assert "0 of 1 replica" in str(unconfirmed.value) and "WAIT" in str(unconfirmed.value)
    assert engine.apply([(ref, fx)])[0].duplicate  # the retry: on the replica now, confirmed
    verdict = engine.durability()
    assert verdict.replicas == 1 and "1 replica" in str(verdict)
    client.close()


def test_a_duplicate_waits_for_the_replica_to_have_the_marker(replicated: Topology) -> None:
    """Consumer A applied the event on the primary, unconfirmed (it will not commit); consumer B
    (another connection, after a rebalance) gets the record again: a duplicate. WAIT covers its
    own connection's writes only, so B's duplicate rewrites the marker and waits for it: while the
    replica lacks the marker B is not confirmed either (a failover would lose what B committed)."""
    group = "g-" + uuid.uuid4().hex[:6]
    a, a_client = engine_on(replicated.primary, group)
    b, b_client = engine_on(replicated.primary, group)
    a.durability(refresh=True), b.durability(refresh=True)
    ref, fx = event(uuid.uuid4().hex)
    replicated.pause(replicated.replicas[0])
    try:
        with pytest.raises(TransientEffectError):
            a.apply([(ref, fx)])
        with pytest.raises(TransientEffectError) as unconfirmed:
            b.apply([(ref, fx)])
        assert unconfirmed.value.reason == "replicas"
        with pytest.raises(TransientEffectError):
            b.already_applied([ref])  # a handler failure's marker check waits the same way
    finally:
        replicated.resume(replicated.replicas[0])
    assert b.apply([(ref, fx)])[0].duplicate
    assert b.already_applied([ref]) == [True]
    a_client.close(), b_client.close()


def test_more_replicas_than_connected_are_never_confirmed(replicated: Topology) -> None:
    """``replicas=2`` with one replica: every apply is unconfirmed, and the error says how many
    acknowledged and the fix."""
    engine, client = engine_on(replicated.primary, "g-" + uuid.uuid4().hex[:6], replicas=2)
    with pytest.raises(TransientEffectError) as unconfirmed:
        engine.apply([event(uuid.uuid4().hex)])
    text = str(unconfirmed.value)
    assert "1 of 2 replicas" in text and "connected_slaves" in text and "--redis-replicas" in text
    client.close()


def test_replicas_zero_waits_for_none(replicated: Topology) -> None:
    """``replicas=0``: the primary's acknowledgement is enough (the window a failover can lose)."""
    engine, client = engine_on(replicated.primary, "g-" + uuid.uuid4().hex[:6], replicas=0)
    replicated.pause(replicated.replicas[0])
    try:
        assert engine.apply([event(uuid.uuid4().hex)])[0].applied
    finally:
        replicated.resume(replicated.replicas[0])
    assert engine.durability().replicas == 0
    client.close()


def test_a_primary_without_replicas_waits_for_none() -> None:
    with RedisServer() as server:
        engine, client = engine_on(server, "g-" + uuid.uuid4().hex[:6])
        assert engine.apply([event(uuid.uuid4().hex)])[0].applied
        verdict = engine.durability()
        assert verdict.replicas == 0 and "0 replicas connected" in verdict.reason and "no replica waited for" in str(verdict)
        client.close()


@pytest.mark.parametrize("replica_aof", ["yes", "no"])
def test_a_waitaof_server_waits_for_the_replicas_fsync(replica_aof: str) -> None:
    """Where the server has WAITAOF the replicas are waited for on disk (``WAITAOF 1 1``): a
    replica with its AOF off never confirms, and the error says so."""
    topology = Topology(sentinels=0, binary=waitaof_binary(), config={"appendfsync": "everysec"})
    topology.replicas[0].config.update(appendonly=replica_aof, appendfsync="always")  # confirms within the 300 ms wait
    with topology:
        engine, client = engine_on(topology.primary, "g-" + uuid.uuid4().hex[:6])
        verdict = engine.durability(refresh=True)
        assert verdict.method == "waitaof" and verdict.replicas == 1 and verdict.replicas_fsync
        if replica_aof == "yes":
            assert engine.apply([event(uuid.uuid4().hex)])[0].applied
        else:
            with pytest.raises(TransientEffectError) as unconfirmed:
                engine.apply([event(uuid.uuid4().hex)])
            assert unconfirmed.value.reason == "replicas" and "appendonly" in str(unconfirmed.value)
        client.close()


def test_the_consumer_user_may_wait_for_replicas(replicated: Topology) -> None:
    """The consumer's ACL (postbox.effects.acl) grants WAIT: without it every apply on a primary
    with a replica would be refused (NOPERM, a configuration error) once the wait is sent."""
    from postbox.effects.acl import consumer_rules

    admin = replicated.primary.client()
    user = "consumer-" + uuid.uuid4().hex[:6]
    admin.execute_command("ACL", "SETUSER", user, "on", ">pw", *consumer_rules())
    try:
        client = redis.Redis(host="127.0.0.1", port=replicated.primary.port, username=user, password="pw")
        engine = EffectsEngine(client, "g-" + uuid.uuid4().hex[:6], functions_dir=None)
        assert engine.durability(refresh=True).replicas == 1
        agg = uuid.uuid4().hex
        ref = EventRef.for_aggregate(str(uuid.uuid4()), "order", agg)
        assert engine.apply([(ref, Effects().incrby(f"{{order:{agg}}}:n", 1))])[0].applied
        assert engine.already_applied([ref]) == [True]
        client.close()
    finally:
        admin.execute_command("ACL", "DELUSER", user)
        admin.close()
