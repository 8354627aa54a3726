"""A ``redis+sentinel://`` URL: the engine follows a promotion without a new client, and reads
its durability verdict again on the promoted server.

A primary, a replica and three Sentinels, private processes (tests/support/replicated_redis.py);
the primary is SIGKILLed, the Sentinels promote the replica. The full pipeline under load is the
fault scenario tests/faults/test_redis_failover.py.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import timedelta

import pytest

from postbox.effects import Effects, EffectsEngine, EventRef, TransientEffectError, aggregate_keys
from postbox.redis_client import connect
from tests.support.replicated_redis import Topology, wait_for

pytestmark = pytest.mark.integration


def until_applied(apply: Callable[[], object], timeout: float = 60) -> list[str]:
    """Retry ``apply`` as the runtime does (transient errors: wait, again); the reasons seen."""
    reasons: list[str] = []
    deadline = time.monotonic() + timeout
    while True:
        try:
            apply()
            return reasons
        except TransientEffectError as exc:
            reasons.append(exc.reason)
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_an_engine_on_a_sentinel_url_follows_a_promotion_and_reads_its_verdict_again() -> None:
    with Topology() as topology:
        client = connect(topology.url, socket_timeout=2, socket_connect_timeout=1)
        engine = EffectsEngine(client, "g-" + uuid.uuid4().hex[:6], functions_dir=None, waitaof_timeout=timedelta(seconds=10))
        before = engine.durability(refresh=True)
        assert before.durable and before.replicas == 1  # auto: the primary has a replica
        agg = uuid.uuid4().hex
        k = aggregate_keys("order", agg)
        first = EventRef.for_aggregate(str(uuid.uuid4()), "order", agg)
        assert engine.apply([(first, Effects().rpush(k("seq"), "1"))])[0].applied

        old = topology.primary.port
        topology.primary.kill()
        promoted = topology.wait_promoted(old)
        second = EventRef.for_aggregate(str(uuid.uuid4()), "order", agg)
        reasons = until_applied(lambda: engine.apply([(second, Effects().rpush(k("seq"), "2"))]))
        # Its connection reached another server (a new run_id) before anything was sent: the verdict
        # was read again there and the batch sent under it, in the same apply. Sent under the old
        # verdict it would have waited the whole wait timeout for a replica the promoted server
        # lacks, then been retried ("server-changed").
        assert "server-changed" not in reasons, reasons

        on_promoted = promoted.client()
        assert on_promoted.lrange(k("seq"), 0, -1) == [b"1", b"2"]  # the first was on the replica (waited for)
        after = engine.durability()
        assert after.durable and after.replicas == 0, after  # read again there: the promoted server has no replica yet
        assert engine.apply([(first, Effects().rpush(k("seq"), "1"))])[0].duplicate  # its marker came along

        topology.primary.start()  # the old primary comes back; the Sentinels make it a replica of the new one
        # A Sentinel converts a returned primary once it has reported its role for 8 s; one whose
        # timer ran late on a loaded machine enters TILT and acts 30 s later: 120 s, logs on timeout.
        wait_for(lambda: on_promoted.info("replication")["connected_slaves"] == 1, 120, "the old primary rejoining as a replica",
                 on_timeout=topology.sentinel_logs)
        assert engine.durability(refresh=True).replicas == 1
        on_promoted.close()
        client.close()
