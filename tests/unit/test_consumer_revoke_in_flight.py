"""#14.2 rebalance safety of the overlapped apply: batch N applies in the worker thread while the loop
reads batch N+1, and a revoke arrives in between (inside ``consume``). The revoke must wait for the
apply in flight and commit the revoked partition exactly up to what it applied — not before it
(applied but uncommitted, redelivered to the next owner), never past it.

The Kafka client and the effects engine are stand-ins (the runtime's bookkeeping is under test;
tests/integration/test_consumer_rebalance.py and the fault suite's rebalance-under-kills scenario
cover the end-to-end property). Shown to fail: with ``self.settle()`` removed from
``Partitions.on_revoke`` (scratch edit, not committed) the revoke committed nothing for the
partition whose two records had been applied."""

from __future__ import annotations

import threading

import redis
from confluent_kafka import TopicPartition

from postbox.consumer import App, ConsumerConfig, ConsumerRuntime
from postbox.consumer.partition_state import PartitionState
from postbox.effects.durability import Durability
from postbox.effects.engine import Outcome
from tests.support.kafka import StandInRecord


class SlowEngine:
    """Applies every event, but only once ``release`` is set (the apply is in flight until then)."""

    cluster = False

    def __init__(self) -> None:
        self.release = threading.Event()
        self.applied: list[str] = []

    def apply_outcomes(self, pairs, **_kw):
        assert self.release.wait(10), "never released"
        self.applied += [ref.id for ref, _fx in pairs]
        return [Outcome.APPLIED for _pair in pairs]

    def durability(self) -> Durability:
        return Durability(True, "appendfsync", "appendfsync always")


class StandInConsumer:
    def __init__(self) -> None:
        self.commits: list[tuple[bool, list[tuple[str, int, int]]]] = []

    def commit(self, *, offsets, asynchronous):
        self.commits.append((asynchronous, [(tp.topic, tp.partition, tp.offset) for tp in offsets]))
        return None if asynchronous else offsets

    def pause(self, partitions) -> None:
        pass


def test_a_revoke_waits_for_the_apply_in_flight_and_commits_exactly_what_it_applied():
    app = App("g", require_schemas=False)
    app.catch_all(lambda event, fx: fx.rpush("{t:a}:seq", event.payload["seq"]))
    config = ConsumerConfig.load({}, group="g", topics="t", redis_url="redis://127.0.0.1:1/0", kafka_bootstrap="127.0.0.1:1")
    runtime = ConsumerRuntime(app, config, redis_client=redis.Redis(port=1), install_signals=False)
    engine, consumer = SlowEngine(), StandInConsumer()
    runtime.engine = engine  # type: ignore[assignment]  # a stand-in: apply and durability are all the pipeline calls
    runtime.partitions.consumer = consumer  # type: ignore[assignment]  # a stand-in recording commits
    runtime.states[("t", 0)] = PartitionState("t", 0)
    try:
        prepared = runtime.pipeline.prepare([StandInRecord(0), StandInRecord(1)])  # type: ignore[list-item]  # stand-in records
        assert prepared is not None
        runtime.pipeline.launch(prepared)  # batch N: its apply is now in flight in the worker
        threading.Timer(0.2, engine.release.set).start()
        runtime.partitions.on_revoke(consumer, [TopicPartition("t", 0)])  # type: ignore[arg-type]  # as consume() calls it
        assert engine.release.is_set(), "the revoke did not wait for the apply"
        assert len(engine.applied) == 2
        assert consumer.commits == [(False, [("t", 0, 2)])]  # synchronously, exactly past the two applied records
        assert runtime.states == {}
        assert not runtime.pipeline.settle()  # nothing left in flight for the loop to settle again
    finally:
        engine.release.set()
        runtime.pipeline.close()
