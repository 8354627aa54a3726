"""The effects harness never deletes keys on a Redis it did not start unless told to: a test
pointed at a shared or production Redis (a ``POSTBOX_REDIS_URL`` left in the shell) used to
delete, on leaving its ``with`` block, every key its handlers had touched — ``{order:42}:totals``
of the real order 42 among them. Without a client the harness starts a private server of its own
and stops it; with one, ``cleanup=True`` asks for the deletion."""

from __future__ import annotations

import pytest
import redis

from postbox.effects import aggregate_keys
from postbox.testing import EffectsHarness, make_event
from tests.support.redis_servers import RedisServer

pytestmark = pytest.mark.integration


def on_paid(event, fx) -> None:  # type: ignore[no-untyped-def]
    fx.hincrby(aggregate_keys("order", event.aggregate_id)("totals"), "paid_cents", event.payload["cents"])


def _paid(order: str = "42") -> object:
    return make_event("OrderPaid", {"cents": 500}, aggregate_type="order", aggregate_id=order)


@pytest.fixture
def foreign() -> "redis.Redis":
    """A server the harness did not start, holding someone's data under the handler's keys."""
    with RedisServer() as server, server.client() as client:
        client.hset("{order:42}:totals", "paid_cents", 10_000)
        client.set("{order:7}:state", "shipped")
        yield client


def test_leaving_the_block_keeps_every_key_of_a_server_it_did_not_start(foreign: redis.Redis) -> None:
    url = f"redis://127.0.0.1:{foreign.connection_pool.connection_kwargs['port']}/0"
    with EffectsHarness(url, schemas_dir=False) as h:
        event = _paid()
        assert h.deliver(on_paid, event).applied
        marker = h.engine.marker_key(h.ref_of(on_paid, event))
    assert foreign.hget("{order:42}:totals", "paid_cents") == b"10500"  # what the test applied stays, with the data
    assert foreign.get("{order:7}:state") == b"shipped"
    assert foreign.exists(marker)


def test_cleanup_true_deletes_what_the_harness_touched_and_nothing_else(foreign: redis.Redis) -> None:
    with EffectsHarness(foreign, schemas_dir=False, cleanup=True) as h:
        assert h.deliver(on_paid, _paid("9")).applied
        assert foreign.hget("{order:9}:totals", "paid_cents") == b"500"
    assert not foreign.exists("{order:9}:totals")
    assert foreign.hget("{order:42}:totals", "paid_cents") == b"10000" and foreign.get("{order:7}:state") == b"shipped"


def test_without_a_client_the_harness_runs_its_own_server(foreign: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """``POSTBOX_REDIS_URL`` naming another server changes nothing: a private server is started
    for the harness and stopped with it."""
    port = foreign.connection_pool.connection_kwargs["port"]
    monkeypatch.setenv("POSTBOX_REDIS_URL", f"redis://127.0.0.1:{port}/0")
    before = foreign.dbsize()
    with EffectsHarness(schemas_dir=False) as h:
        assert h.deliver(on_paid, _paid()).applied
        assert h.redis.hget("{order:42}:totals", "paid_cents") == b"500"
        own_pid = int(h.redis.info("server")["process_id"])
        assert own_pid != int(foreign.info("server")["process_id"])
    assert foreign.dbsize() == before and foreign.hget("{order:42}:totals", "paid_cents") == b"10000"
    with pytest.raises(ProcessLookupError):
        import os

        os.kill(own_pid, 0)
