"""The durability verdict belongs to the server it was read on: a server that changed behind the
same address (restarted with other settings, a DNS name or VIP moved, a failover, a slot moved on
a cluster) is checked again before anything applied on it is called durable.

Before the fix the verdict was cached for a minute whatever happened: redis-py reconnected by
itself to a server restarted with ``appendonly no`` and the engine went on calling its applies
durable (the runtime committed them) until the minute was over; a cluster's slot-map refresh
after MOVED did not re-read the primaries either. Now each connection the engine sends on reads
the ``run_id`` of the server it reached when it connects, and a new one (or a topology refresh)
makes the engine re-read durability. A connection found on a new server before anything was sent
on it (it reconnected when taken from the pool, the common case) sends nothing under the old
verdict: the verdict is read again and the batch sent under the new one (with the WAITAOF it
needs, or judged not durable by the runtime). One that reached the new server in the middle of a
round (reconnected by redis-py's retry) is reported as a transient ``server-changed`` failure:
retried, never committed.

Each test runs its own servers.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from postbox.effects import Effects, EffectsEngine, EventRef, TransientEffectError, aggregate_keys
from tests.support.redis_servers import RedisServer, waitaof_server

pytestmark = pytest.mark.integration


@pytest.fixture
def server() -> Iterator[RedisServer]:
    started = RedisServer().start()  # appendonly yes, appendfsync always
    yield started
    started.stop()


def _event(agg: str = "") -> tuple[EventRef, Effects]:
    agg = agg or uuid.uuid4().hex
    return EventRef.for_aggregate(str(uuid.uuid4()), "order", agg), Effects().incrby(aggregate_keys("order", agg)("n"), 1)


def _restart(server: RedisServer, **config: str) -> None:
    """The same port and folder, other settings: what a redeploy of the server does."""
    server.stop(keep_dir=True)
    server.config.update(config)
    server.start()


def test_a_server_restarted_without_aof_on_the_same_port_is_not_durable_at_once(server: RedisServer) -> None:
    client = server.client()
    engine = EffectsEngine(client, "g", functions_dir=None)  # the default: the verdict re-read once a minute
    assert engine.apply_one(*_event()).applied and engine.durability().durable
    _restart(server, appendonly="no")
    assert engine.apply_one(*_event()).applied  # redis-py reconnects to the new server inside this call
    verdict = engine.durability()  # its verdict, read before the batch went out: the runtime holds the commit
    assert not verdict.durable and "appendonly is off" in verdict.reason, verdict
    client.close()


def test_a_reconnect_to_the_same_server_changes_nothing(server: RedisServer) -> None:
    """A dropped connection (CLIENT KILL here; a network blip) comes back to the same run_id: no
    retry, the verdict stands."""
    client = server.client()
    engine = EffectsEngine(client, "g", functions_dir=None)
    assert engine.apply_one(*_event()).applied
    admin = server.client()
    assert admin.client_kill_filter(_type="normal", skipme=True) >= 1
    assert engine.apply_one(*_event()).applied and engine.durability().durable
    admin.close()
    client.close()


def test_a_server_restarted_with_everysec_is_waited_for_with_waitaof() -> None:
    """The verdict chose ``appendfsync always`` (no WAITAOF needed); the server comes back with
    ``everysec``. The batch is not sent without the WAITAOF it now needs: the verdict is read
    again first, and the batch goes out with WAITAOF."""
    server = waitaof_server(appendfsync="always").start()
    client = server.client()
    try:
        engine = EffectsEngine(client, "g", functions_dir=None)
        assert engine.durability(refresh=True).method == "appendfsync-always"
        assert engine.apply_one(*_event()).applied
        _restart(server, appendfsync="everysec")
        ref, fx = _event()
        assert engine.apply_one(ref, fx).applied and engine.durability().method == "waitaof"
        admin = server.client()
        try:
            waited = admin.info("commandstats").get("cmdstat_waitaof", {}).get("calls", 0)
            assert engine.apply_one(ref, fx).duplicate
            assert admin.info("commandstats")["cmdstat_waitaof"]["calls"] == waited + 1  # each apply waits
        finally:
            admin.close()
    finally:
        client.close()
        server.stop()


def test_a_pipeline_never_commits_what_it_applied_on_a_restarted_server(server: RedisServer) -> None:
    """The runtime's view: the record applied on the restarted server is held back (its partition
    retried from it), not handed to the commit."""
    from tests.support.pipeline_scene import Scene

    client = server.client()
    scene = Scene(client, lambda c: EffectsEngine(c, "g", functions_dir=None))
    try:
        state = scene.assign()
        scene.deliver(0)
        assert state.done == 1
        _restart(server, appendonly="no")
        scene.deliver(1)
        assert state.done == 1, "committed past a record applied on a server nobody checked"
        assert scene.retries("not-durable") == 1, "the new server's verdict was not read before the commit"
        scene.retry(state, 1)
        assert state.done == 1 and scene.retries("not-durable") == 2, "the new server is not durable: still held"
    finally:
        scene.close()
        client.close()


def test_a_slot_map_refresh_after_moved_reads_the_primaries_again() -> None:
    """A slot moved to another primary whose AOF was switched off meanwhile (same run_id: only a
    topology change tells): the MOVED reply refreshes the slot map, and the verdict with it."""
    from tests.support.redis_servers import RedisClusterProcesses

    nodes = RedisClusterProcesses().start()
    client = nodes.client()
    try:
        engine = EffectsEngine(client, "g", functions_dir=None)
        agg = uuid.uuid4().hex
        assert engine.apply_one(*_event(agg)).applied and engine.durability().durable
        key = aggregate_keys("order", agg)("n")
        slot = client.keyslot(key)
        source = client.get_node_from_key(key)
        target = next(n for n in client.get_primaries() if n.name != source.name)
        target_client = redis.Redis(host=target.host, port=target.port)
        target_client.config_set("appendonly", "no")
        target_id = target_client.execute_command("CLUSTER", "MYID")
        keys = client.get_redis_connection(source).execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100)
        source_client = client.get_redis_connection(source)
        target_client.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_client.execute_command("CLUSTER", "MYID"))
        source_client.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        source_client.execute_command("MIGRATE", target.host, target.port, "", 0, 5000, "KEYS", *keys)
        for server in nodes.servers:
            server.client().execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        with pytest.raises(TransientEffectError) as changed:
            engine.apply_one(*_event(agg))  # MOVED, then sent to the slot's new primary
        assert changed.value.reason == "server-changed"
        verdict = engine.durability()
        assert not verdict.durable and target.name in verdict.reason, verdict
        target_client.close()
    finally:
        client.close()
        nodes.stop()
