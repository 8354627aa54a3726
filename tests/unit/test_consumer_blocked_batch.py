"""Records after a blocked record in one batch: nothing at or after the block is applied,
dead-lettered or committed in that batch, and the retry takes them in order.

A partition is blocked at a record that must not be committed yet: its handler asks for a retry
(a dependency is down), its dead letter is not acknowledged, or the failure stream cannot be
written before its dead letter. Every record after it in the batch — good ones, and ones that
would be dead-lettered — waits for the retry: applied or dead-lettered now, it would take effect
before the blocked record of its aggregate. The other partitions of the batch go on. (The
permanent failures known when a batch is launched are dead-lettered in one send: when the first
one's dead letter is refused, the later ones may be acknowledged in that same send. They are then
owed as delivered: the retry finishes them without running them or sending them again.)

The real pipeline (prepare, launch, settle) and batch model decide; the stand-ins are the
pipeline's collaborators: an engine that records what it is given and applies it, a dead-letter
writer that acknowledges or refuses as scripted, a Kafka client that takes pause/resume/seek
(tests/integration/test_consumer_dlq_order.py shows the same on the stack).
"""

from __future__ import annotations

import json

import pytest
import redis

from postbox.consumer import App, ConsumerConfig, ConsumerRuntime, Retry
from postbox.consumer.partition_state import PartitionState
from postbox.effects.durability import Durability
from postbox.effects.engine import Outcome
from postbox.errors import TransientEffectError
from tests.support.kafka import PartitionedRecord

BLOCKED = 3
#: After the block: a handler that fails for good, an undecodable record, good records.
RAISES, UNDECODABLE = 5, 6
P0_RECORDS, P1_RECORDS = 8, 4


class Record(PartitionedRecord):
    def value(self) -> bytes:
        if self._partition == 0 and self._offset == UNDECODABLE:
            return b"not json"
        return json.dumps({"seq": self._offset}).encode()


class RecordingEngine:
    """Applies whatever it is given (every event new), recording (partition, seq) in order."""

    cluster = False
    client = None

    def __init__(self) -> None:
        self.applied: list[tuple[int, int]] = []

    def apply_outcomes(self, pairs, **_kw):
        for _ref, fx in pairs:
            partition, seq = (int(a) for a in fx.commands[0].args)
            self.applied.append((partition, seq))
        return [Outcome.APPLIED for _ in pairs]

    def durability(self) -> Durability:
        return Durability(True, "appendfsync", "appendfsync always")

    def record_failures(self, failures) -> list:
        return [None for _ in failures]  # every handler failure is new (its verdict written)

    def mark_delivered(self, _failures) -> None:
        return None

    def withdraw_failures(self, _refs) -> None:
        return None


class ScriptedDeadLetters:
    def __init__(self) -> None:
        self.refused: set[tuple[int, int]] = set()
        self.stream_down_for: set[tuple[int, int]] = set()
        self.sent: list[tuple[int, int]] = []

    def record(self, _engine, entries) -> None:
        if any((origin.partition, origin.offset) in self.stream_down_for for origin, _id, _f in entries):
            raise TransientEffectError("cannot write the failure stream (connection): scripted", reason="connection")

    def send(self, items):
        out = []
        for origin, _failure in items:
            where = (origin.partition, origin.offset)
            self.sent.append(where)
            out.append("DLQ produce failed: scripted" if where in self.refused else None)
        return out


class KafkaClient:
    def pause(self, _partitions) -> None:
        return None

    def resume(self, _partitions) -> None:
        return None

    def seek(self, _partition) -> None:
        return None


@pytest.mark.parametrize("cause", ["handler-retry", "dead-letter-refused", "failure-stream-down"])
def test_nothing_at_or_after_a_block_is_applied_dead_lettered_or_committed_and_the_retry_takes_it_in_order(cause: str) -> None:
    retry_now = {"on": True}
    handled: list[tuple[int, int]] = []

    def handler(event, fx) -> None:
        where = (event.partition, event.payload["seq"])
        handled.append(where)
        if where == (0, BLOCKED) and cause == "handler-retry" and retry_now["on"]:
            raise Retry("the payment service is down")
        if where == (0, BLOCKED) and cause != "handler-retry" or where == (0, RAISES):
            raise ValueError("a handler bug")
        fx.rpush("{t:a}:seq", event.partition, event.payload["seq"])

    app = App("g", require_schemas=False)
    app.catch_all(handler)
    config = ConsumerConfig.load({}, group="g", topics="t", redis_url="redis://127.0.0.1:1/0", kafka_bootstrap="127.0.0.1:1",
                                 handler_retries=0)
    runtime = ConsumerRuntime(app, config, redis_client=redis.Redis(port=1), install_signals=False)
    engine = RecordingEngine()
    runtime.engine = engine  # type: ignore[assignment]
    letters = ScriptedDeadLetters()
    if cause == "dead-letter-refused":
        letters.refused.add((0, BLOCKED))
    if cause == "failure-stream-down":
        letters.stream_down_for.add((0, BLOCKED))
    runtime.pipeline.dead_letters = letters  # type: ignore[assignment]
    runtime.partitions.consumer = KafkaClient()  # type: ignore[assignment]
    p0 = runtime.states[("t", 0)] = PartitionState("t", 0)
    p1 = runtime.states[("t", 1)] = PartitionState("t", 1)
    pipeline = runtime.pipeline
    batch = [Record(p, o) for o in range(P0_RECORDS) for p in (0, 1) if p == 0 or o < P1_RECORDS]  # interleaved
    try:
        pipeline.launch(pipeline.prepare(batch))  # type: ignore[arg-type]
        pipeline.settle()

        assert [o for p, o in engine.applied if p == 0] == [0, 1, 2], "a record at or after the block was applied"
        assert [o for p, o in engine.applied if p == 1] == [0, 1, 2, 3], "the other partition waited"
        # dead letters sent before the block was known: those of one launch go out together
        assert letters.sent == ([(0, BLOCKED), (0, RAISES), (0, UNDECODABLE)] if cause == "dead-letter-refused" else []), \
            "a record after the block was dead-lettered"
        assert (p0.done, p0.resume_offset, p0.paused) == (BLOCKED, BLOCKED, True)
        assert (p1.done, p1.paused) == (P1_RECORDS, False)
        if cause == "handler-retry":
            assert [o for p, o in handled if p == 0] == [0, 1, 2, 3], "a handler after the block ran"

        # the cause heals; the partition resumes and is read again from the block
        retry_now["on"] = False
        letters.refused.clear()
        letters.stream_down_for.clear()
        p0.resume_at = 0.0
        runtime.partitions.resume_due()
        pipeline.launch(pipeline.prepare([Record(0, o) for o in range(p0.resume_offset, P0_RECORDS)]))  # type: ignore[arg-type]
        pipeline.settle()
    finally:
        pipeline.close()

    after = [0, 1, 2] + ([BLOCKED] if cause == "handler-retry" else []) + [4, 7]
    assert [o for p, o in engine.applied if p == 0] == after, "the retry applied out of order or twice"
    dead = {"handler-retry": [(0, RAISES), (0, UNDECODABLE)],
            "dead-letter-refused": [(0, BLOCKED), (0, RAISES), (0, UNDECODABLE), (0, BLOCKED)],  # the first one refused
            "failure-stream-down": [(0, BLOCKED), (0, RAISES), (0, UNDECODABLE)]}[cause]
    assert letters.sent == dead, "a dead letter sent twice, or one missing"
    assert (p0.done, p0.paused, p0.owed) == (P0_RECORDS, False, {})
