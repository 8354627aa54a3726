"""The consumer's public observation hook (``ConsumerRuntime(observer=...)``): after each settled
batch, the observer is told of every record the batch finished — its event id, where it was
read, its Kafka timestamp, when its batch arrived, when its apply was acknowledged and its
outcome — and of none it left for a retry. An observer that raises changes nothing delivered.

The effects engine and the Kafka client are stand-ins (the runtime's bookkeeping is under test;
tests/integration/test_consumer_observer.py runs the real services). Shown to fail (scratch
edit): with the observer called before _account marks the fates, it was told of nothing.
"""

from __future__ import annotations

import time

import redis

from postbox.consumer import App, ConsumerConfig, ConsumerRuntime, Observed
from postbox.consumer.observation import APPLIED, DUPLICATE
from postbox.consumer.partition_state import PartitionState
from postbox.effects.durability import Durability
from postbox.effects.engine import ApplyResult, Outcome
from tests.support.kafka import StandInRecord


class ScriptedEngine:
    """Answers each apply with the scripted verdicts, in order."""

    cluster = False

    def __init__(self, verdicts: list) -> None:
        self.verdicts = verdicts

    def apply_outcomes(self, pairs, **_kw):
        return [verdict for _pair, verdict in zip(pairs, self.verdicts)]

    def durability(self) -> Durability:
        return Durability(True, "appendfsync", "appendfsync always")


class PausingConsumer:
    def pause(self, partitions) -> None:
        pass


def _runtime(verdicts: list, observer) -> ConsumerRuntime:
    app = App("g", require_schemas=False)
    app.catch_all(lambda event, fx: fx.rpush("{t:a}:seq", event.payload["seq"]))
    config = ConsumerConfig.load({}, group="g", topics="t", redis_url="redis://127.0.0.1:1/0", kafka_bootstrap="127.0.0.1:1")
    runtime = ConsumerRuntime(app, config, redis_client=redis.Redis(port=1), install_signals=False, observer=observer)
    runtime.engine = ScriptedEngine(verdicts)  # type: ignore[assignment]  # a stand-in: apply and durability are all the pipeline calls
    runtime.partitions.consumer = PausingConsumer()  # type: ignore[assignment]
    runtime.states[("t", 0)] = PartitionState("t", 0)
    return runtime


def _settle(runtime: ConsumerRuntime, records: list[StandInRecord]) -> None:
    try:
        runtime.pipeline.launch(runtime.pipeline.prepare(records))  # type: ignore[arg-type]  # stand-in records
        assert runtime.pipeline.settle()
    finally:
        runtime.pipeline.close()


def test_the_observer_is_told_of_each_finished_record_with_its_timings_and_outcome() -> None:
    seen: list[Observed] = []
    records = [StandInRecord(i) for i in range(10, 14)]
    ids = [dict(r.headers())["id"].decode() for r in records]
    for record, event_id in zip(records, ids):  # a stand-in's id is fresh per call: pin it
        record.headers = lambda eid=event_id: [("id", eid.encode()), ("event_type", b"Counted"), ("aggregate_type", b"t")]  # type: ignore[method-assign]
    before = time.time()
    runtime = _runtime([Outcome.APPLIED, Outcome.DUPLICATE, Outcome.APPLIED, Outcome.APPLIED], seen.extend)
    _settle(runtime, records)
    after = time.time()
    assert [(o.event_id, o.topic, o.partition, o.offset, o.outcome) for o in seen] == [
        (ids[0], "t", 0, 10, APPLIED), (ids[1], "t", 0, 11, DUPLICATE), (ids[2], "t", 0, 12, APPLIED), (ids[3], "t", 0, 13, APPLIED)
    ]
    assert [o.kafka_timestamp_ms for o in seen] == [1_700_000_000_010, 1_700_000_000_011, 1_700_000_000_012, 1_700_000_000_013]
    for o in seen:
        assert before <= o.batch_received <= o.acknowledged <= after


def test_a_record_left_for_a_retry_is_not_reported_until_it_finishes() -> None:
    """The second record is held (its Redis Cluster node down): it is not finished by this batch
    and not reported (the third, applied in Redis, is; the commit stops before the held one)."""
    seen: list[Observed] = []
    held = ApplyResult("x", Outcome.RETRY, error="node down", reason="node-down")
    runtime = _runtime([Outcome.APPLIED, held, Outcome.APPLIED], seen.extend)
    _settle(runtime, [StandInRecord(i) for i in range(3)])
    assert [(o.offset, o.outcome) for o in seen] == [(0, APPLIED), (2, APPLIED)]
    assert runtime.states[("t", 0)].done == 1  # committed before the held record


def test_an_observer_that_raises_changes_nothing_delivered() -> None:
    def broken(_records) -> None:
        raise RuntimeError("observer bug")

    runtime = _runtime([Outcome.APPLIED] * 3, broken)
    _settle(runtime, [StandInRecord(i) for i in range(3)])
    assert runtime.states[("t", 0)].done == 3
    assert runtime.metrics.total("postbox_consumer_events_applied_total") == 3


def test_without_an_observer_the_batch_settles_as_before() -> None:
    runtime = _runtime([Outcome.APPLIED] * 3, None)
    _settle(runtime, [StandInRecord(i) for i in range(3)])
    assert runtime.states[("t", 0)].done == 3
