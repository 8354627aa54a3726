"""EffectsEngine.already_applied, the marker check before a handler failure is dead-lettered: what
Redis answers becomes the runtime's error classes (the engine's one classification), so a Redis
Cluster failover pauses the partition instead of stopping the consumer. The real-Redis answers
are in tests/integration/test_effects_marker_identity.py; here a stand-in client raises what
redis-py raises during a failover (no cluster needed to bring those exceptions about)."""

from __future__ import annotations

import pytest
import redis
from redis.exceptions import ClusterError, SlotNotCoveredError

from postbox.effects import EffectsEngine, EventRef
from postbox.errors import TransientEffectError


class FailingPool:
    def __init__(self, error: BaseException) -> None:
        self.error = error

    def get_connection(self) -> None:
        raise self.error


class StandInClient:
    """Every command fails with ``error``: the durability check's reads and the marker round trip."""

    connection = None  # not a single-connection client: round trips take a pool connection

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.connection_pool = FailingPool(error)

    def info(self, _section: str) -> dict:
        raise self.error

    def config_get(self, _pattern: str) -> dict:
        raise self.error


@pytest.mark.parametrize("error", [
    SlotNotCoveredError("Slot 8190 is not covered by the cluster."),
    ClusterError("TTL exhausted."),
    redis.ConnectionError("Connection refused"),
    redis.exceptions.ClusterDownError("CLUSTERDOWN The cluster is down"),
], ids=["slot-not-covered", "ttl-exhausted", "connection", "clusterdown"])
def test_a_failover_or_an_outage_is_transient(error) -> None:
    engine = EffectsEngine(StandInClient(error), "billing", functions_dir=None)  # type: ignore[arg-type]
    with pytest.raises(TransientEffectError):
        engine.already_applied([EventRef("e1", "order:1")])


def test_no_events_asks_nothing() -> None:
    engine = EffectsEngine(StandInClient(AssertionError("asked")), "billing", functions_dir=None)  # type: ignore[arg-type]
    assert engine.already_applied([]) == []
