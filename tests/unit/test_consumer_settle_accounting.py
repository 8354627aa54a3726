"""#14.2 part 2: settle accounts a batch's apply results per batch (Pipeline._account: the applied
records picked out in one pass, the rest through _account_others). What a user relies on: the
offset committed for a partition is past exactly the records that are finished — applied or
duplicates — and never past a record the engine gave no verdict on, and the applied/duplicate
counters count each record once.

The effects engine and the Kafka client are stand-ins (the runtime's bookkeeping is under test;
the integration and fault suites cover the end-to-end property). Shown to fail (scratch edit):
with the all-applied shortcut taken on ``outcomes.count(APPLIED) == len(outcomes)`` alone, the
short-reply case committed offset 4, past the two records that had no result.
"""

from __future__ import annotations

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from postbox.consumer import App, ConsumerConfig, ConsumerRuntime
from postbox.consumer.partition_state import PartitionState
from postbox.effects.durability import Durability
from postbox.effects.engine import Outcome
from postbox.errors import EffectEngineError
from tests.support.kafka import StandInRecord


class ScriptedEngine:
    """Answers each apply with the scripted outcomes, in order (fewer than the events: a short reply)."""

    cluster = False

    def __init__(self, outcomes: list[Outcome]) -> None:
        self.outcomes = outcomes

    def apply_outcomes(self, pairs, **_kw):
        """As EffectsEngine.apply_outcomes: an applied or duplicate event's verdict is its outcome."""
        return [outcome for _pair, outcome in zip(pairs, self.outcomes)]

    def durability(self) -> Durability:
        return Durability(True, "appendfsync", "appendfsync always")


class PausingConsumer:
    """Records the partitions the runtime pauses (a partition left unfinished is paused and retried)."""

    def __init__(self) -> None:
        self.paused: list[tuple[str, int]] = []

    def pause(self, partitions) -> None:
        self.paused += [(tp.topic, tp.partition) for tp in partitions]


def _settled(outcomes: list[Outcome], records: int) -> ConsumerRuntime:
    app = App("g", require_schemas=False)
    app.catch_all(lambda event, fx: fx.rpush("{t:a}:seq", event.payload["seq"]))
    config = ConsumerConfig.load({}, group="g", topics="t", redis_url="redis://127.0.0.1:1/0", kafka_bootstrap="127.0.0.1:1")
    runtime = ConsumerRuntime(app, config, redis_client=redis.Redis(port=1), install_signals=False)
    runtime.engine = ScriptedEngine(outcomes)  # type: ignore[assignment]  # a stand-in: apply and durability are all the pipeline calls
    runtime.partitions.consumer = PausingConsumer()  # type: ignore[assignment]  # a stand-in recording pauses
    runtime.states[("t", 0)] = PartitionState("t", 0)
    prepared = runtime.pipeline.prepare([StandInRecord(i) for i in range(records)])  # type: ignore[misc]  # stand-in records
    try:
        runtime.pipeline.launch(prepared)
        assert runtime.pipeline.settle()
    finally:
        runtime.pipeline.close()
    return runtime


def _count(runtime: ConsumerRuntime, name: str) -> float:
    return runtime.metrics.total(name)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([Outcome.APPLIED, Outcome.DUPLICATE]), min_size=1, max_size=6))
def test_the_commit_is_past_every_applied_or_duplicate_record(outcomes: list[Outcome]) -> None:
    runtime = _settled(outcomes, len(outcomes))
    assert runtime.states[("t", 0)].done == len(outcomes)
    assert _count(runtime, "postbox_consumer_events_consumed_total") == len(outcomes)  # one topic: counted per batch
    assert _count(runtime, "postbox_consumer_events_applied_total") == outcomes.count(Outcome.APPLIED)
    assert _count(runtime, "postbox_consumer_duplicates_skipped_total") == outcomes.count(Outcome.DUPLICATE)


def test_a_record_without_a_result_is_not_committed_past() -> None:
    """The engine answers one result per event; if it ever answered fewer, the records left
    without a verdict keep the commit before them (redelivered, deduplicated) instead of skipped."""
    runtime = _settled([Outcome.APPLIED, Outcome.APPLIED], 4)
    state = runtime.states[("t", 0)]
    assert state.done == 2
    assert state.resume_offset == 2  # retried from the first record without a verdict
    assert runtime.partitions.consumer.paused == [("t", 0)]  # type: ignore[union-attr]  # the stand-in
    assert _count(runtime, "postbox_consumer_events_applied_total") == 2


class RecordOf(StandInRecord):
    """A stand-in record of another topic or partition."""

    def __init__(self, topic: str, partition: int, offset: int) -> None:
        super().__init__(offset)
        self._where = (topic, partition)

    def topic(self) -> str:
        return self._where[0]

    def partition(self) -> int:
        return self._where[1]


def test_a_whole_batch_applied_commits_every_partition_and_counts_each_topic() -> None:
    """The common batch (every record applied, over several topics and partitions) is marked at
    once (Batch.finish_every) and counted per topic from the batch's partitions: each partition's
    commit is past its last record, each topic's applied counter counts its records once. Shown
    to fail with the per-topic counts taken from the first partition only (the counters
    came out short)."""
    where = [("t", 0)] * 3 + [("u", 1)] * 2 + [("t", 2)] * 4
    app = App("g", require_schemas=False)
    app.catch_all(lambda event, fx: fx.rpush("{t:a}:seq", event.payload["seq"]))
    config = ConsumerConfig.load({}, group="g", topics="t,u", redis_url="redis://127.0.0.1:1/0", kafka_bootstrap="127.0.0.1:1")
    runtime = ConsumerRuntime(app, config, redis_client=redis.Redis(port=1), install_signals=False)
    runtime.engine = ScriptedEngine([Outcome.APPLIED] * len(where))  # type: ignore[assignment]  # a stand-in
    runtime.partitions.consumer = PausingConsumer()  # type: ignore[assignment]  # a stand-in recording pauses
    for tp in set(where):
        runtime.states[tp] = PartitionState(*tp)
    records = [RecordOf(topic, partition, 10 + i) for i, (topic, partition) in enumerate(where)]
    try:
        runtime.pipeline.launch(runtime.pipeline.prepare(records))  # type: ignore[arg-type]  # stand-in records
        assert runtime.pipeline.settle()
    finally:
        runtime.pipeline.close()
    assert {tp: state.done for tp, state in runtime.states.items()} == {("t", 0): 13, ("u", 1): 15, ("t", 2): 19}
    assert runtime.metrics.value("postbox_consumer_events_applied_total", topic="t") == 7
    assert runtime.metrics.value("postbox_consumer_events_applied_total", topic="u") == 2
    assert runtime.metrics.value("postbox_consumer_events_consumed_total", topic="t") == 7
    assert runtime.metrics.value("postbox_consumer_events_consumed_total", topic="u") == 2
    assert runtime.partitions.consumer.paused == []  # type: ignore[union-attr]  # the stand-in


def test_a_failure_verdict_without_its_details_stops_the_consumer_and_commits_nothing() -> None:
    """apply_outcomes gives a failed or retried event as its full result (error, command); a bare
    FAILED outcome would leave nothing to dead-letter, so settle raises an engine error (the
    consumer stops, exit 3) instead of guessing. Shown to fail without that check (an
    AttributeError on the bare outcome)."""
    with pytest.raises(EffectEngineError, match="without its result"):
        _settled([Outcome.APPLIED, Outcome.FAILED], 2)
