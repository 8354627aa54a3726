"""The pipeline's settle against a straightforward model, on generated fates (review of #14.2's
per-batch settle: the all-applied shortcut, finish_every, the others accounted apart).

A batch of records over three partitions goes through the real prepare, launch and settle; the
effects engine answers each event with a generated verdict — applied, a duplicate, a permanent
failure, or held back (RETRY, a Cluster node down) — or fails the whole apply transiently; each
permanent failure's dead letter is acknowledged or not; one partition may be lost while the apply
is in flight (a rebalance). The model, per partition in offset order: applied, duplicate and
acknowledged dead letters are finished; the commit is the first record that is not (a held record,
one whose dead letter was not acknowledged, every record of a transient apply) or after the last.

What a user relies on, checked against it: the committed offset never passes a record whose
effect is not applied (or dead-lettered), and is not held back behind finished ones; every
permanent failure is sent to the dead-letter topic exactly once and a failure whose dead letter
was not acknowledged is owed (dead-lettered on the retry, never run again); held records ride
into the next batch; a lost partition gets no commit; the counters count each record once.

Stand-ins: the engine, the dead-letter producer and the Kafka client (the runtime's bookkeeping is
under test; the integration and fault suites cover the services).
"""

from __future__ import annotations

import uuid

import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from postbox.consumer import App, ConsumerConfig, ConsumerRuntime
from postbox.consumer.partition_state import PartitionState
from postbox.effects.durability import Durability
from postbox.effects.engine import ApplyResult, Outcome
from postbox.effects.verdicts import Verdict
from postbox.errors import TransientEffectError
from tests.support.kafka import PartitionedRecord as Record

PARTITIONS = 3
#: A record's fate as generated: the engine's verdict, and for a failure whether its dead letter is acknowledged.
APPLIED, DUPLICATE, FAILED_ACKED, FAILED_UNACKED, HELD = "applied", "duplicate", "failed+ack", "failed-noack", "held"
FATES = st.sampled_from([APPLIED, APPLIED, APPLIED, DUPLICATE, FAILED_ACKED, FAILED_UNACKED, HELD])




class ScriptedEngine:
    cluster = False

    def __init__(self, verdicts: list, transient: bool) -> None:
        self.verdicts = verdicts
        self.transient = transient
        self.client = None

    def apply_outcomes(self, pairs, **_kw):
        assert len(pairs) == len(self.verdicts), "the engine was given other records than the model's"
        if self.transient:
            raise TransientEffectError("Redis unreachable: scripted", reason="connection")
        return [v if isinstance(v, Outcome) else ApplyResult(pair[0].id, **v) for pair, v in zip(pairs, self.verdicts)]

    def durability(self) -> Durability:
        return Durability(True, "appendfsync", "appendfsync always")

    def record_failures(self, failures) -> list:
        return [None for _ in failures]  # no markers kept: every handler failure is new

    def mark_delivered(self, _failures) -> None:
        return None

    def withdraw_failures(self, _refs) -> None:
        return None


class ScriptedDeadLetters:
    """Acknowledges each dead letter or not, as scripted by the record's (partition, offset)."""

    def __init__(self, refused: set[tuple[int, int]]) -> None:
        self.refused = refused
        self.sent: list[tuple[int, int]] = []

    def record(self, _engine, _entries) -> None:
        return None

    def send(self, items):
        out = []
        for origin, _failure in items:
            self.sent.append((origin.partition, origin.offset))
            out.append("DLQ produce failed: scripted" if (origin.partition, origin.offset) in self.refused else None)
        return out


class PausingConsumer:
    def pause(self, _partitions) -> None:
        return None


def _verdict(fate: str):
    if fate == APPLIED:
        return Outcome.APPLIED
    if fate == DUPLICATE:
        return Outcome.DUPLICATE
    if fate == HELD:
        return {"outcome": Outcome.RETRY, "error": "node down", "reason": "connection"}
    return {"outcome": Outcome.FAILED, "command_index": 0, "op": "rpush", "command": "RPUSH '{t:a}:seq' (1 args)",
            "error": "WRONGTYPE Operation against a key holding the wrong kind of value", "error_class": "permanent"}


def _model(fates: list[str], first: int, transient: bool) -> tuple[int, list[int], bool]:
    """(commit, held offsets carried, paused) of one partition whose records start at ``first``."""
    if transient:
        return first, [], True
    held: list[int] = []
    commit = None
    for offset, fate in enumerate(fates, start=first):
        if fate == FAILED_UNACKED:
            return (commit if commit is not None else offset), held, True
        if fate == HELD:
            held.append(offset)
            commit = offset if commit is None else commit
    return (commit if commit is not None else first + len(fates)), held, False


@settings(max_examples=150, deadline=None)
@given(
    per_partition=st.lists(st.lists(FATES, min_size=0, max_size=6), min_size=PARTITIONS, max_size=PARTITIONS),
    firsts=st.lists(st.integers(0, 50), min_size=PARTITIONS, max_size=PARTITIONS),
    transient=st.booleans(),
    lost=st.none() | st.integers(0, PARTITIONS - 1),
    interleave=st.randoms(use_true_random=False),
)
def test_settle_commits_what_the_model_commits(per_partition, firsts, transient, lost, interleave) -> None:
    records = []  # Kafka hands a batch's records interleaved across partitions, each in offset order
    queues = [[(p, firsts[p] + i, fate) for i, fate in enumerate(fates)] for p, fates in enumerate(per_partition)]
    while any(queues):
        queue = interleave.choice([q for q in queues if q])
        records.append(queue.pop(0))
    if not records:
        return

    app = App("g", require_schemas=False)
    app.catch_all(lambda event, fx: fx.rpush("{t:a}:seq", event.payload["seq"]))
    config = ConsumerConfig.load({}, group="g", topics="t", redis_url="redis://127.0.0.1:1/0", kafka_bootstrap="127.0.0.1:1")
    runtime = ConsumerRuntime(app, config, redis_client=redis.Redis(port=1), install_signals=False)
    runtime.engine = ScriptedEngine([_verdict(f) for _p, _o, f in records], transient)  # type: ignore[assignment]
    refused = {(p, o) for p, o, f in records if f == FAILED_UNACKED}
    letters = ScriptedDeadLetters(refused)
    runtime.pipeline.dead_letters = letters  # type: ignore[assignment]
    runtime.partitions.consumer = PausingConsumer()  # type: ignore[assignment]
    for p in range(PARTITIONS):
        runtime.states[("t", p)] = PartitionState("t", p)
    prepared = runtime.pipeline.prepare([Record(p, o) for p, o, _f in records])  # type: ignore[misc]
    try:
        runtime.pipeline.launch(prepared)
        if lost is not None:  # a rebalance took the partition while its apply was in flight
            del runtime.states[("t", lost)]
        assert runtime.pipeline.settle()
    finally:
        runtime.pipeline.close()

    carried = {(i.tp[1], i.offset) for i in runtime.pipeline._carried}
    for p, fates in enumerate(per_partition):
        if not fates:
            continue
        commit, held, paused = _model(fates, firsts[p], transient)
        if p == lost:
            assert ("t", p) not in runtime.states
            continue
        state = runtime.states[("t", p)]
        assert state.done == commit, (p, fates, transient)
        assert state.paused == paused, (p, fates)
        # failures without an acknowledged dead letter, and those acknowledged at or after the
        # commit (re-read by the retry, or after a restart behind a held record: dead-lettered
        # already, they are finished without running again)
        unacked = [o for o, f in enumerate(fates, start=firsts[p]) if f == FAILED_UNACKED]
        owed = set(unacked) | {o for o, f in enumerate(fates, start=firsts[p]) if f == FAILED_ACKED and (unacked or held) and o >= commit}
        owed = owed if not transient else set()
        assert set(state.owed) == owed, (p, fates, state.owed)
        assert {o for q, o in carried if q == p} == set(held), (p, fates)  # those before the block, if any

    failed = sorted((p, o) for p, o, f in records if f in (FAILED_ACKED, FAILED_UNACKED))
    assert sorted(letters.sent) == ([] if transient else failed), "each permanent failure is sent once"
    if not transient:
        assert runtime.metrics.total("postbox_consumer_events_applied_total") == sum(f == APPLIED for *_x, f in records)
        assert runtime.metrics.total("postbox_consumer_duplicates_skipped_total") == sum(f == DUPLICATE for *_x, f in records)
        assert runtime.metrics.total("postbox_consumer_dead_lettered_total") == sum(f == FAILED_ACKED for *_x, f in records)


class RecordingEngine(ScriptedEngine):
    """Answers round after round with the scripted verdicts (applied when none is scripted) and
    records which records each round was given."""

    def __init__(self, rounds: list[dict[int, object]]) -> None:
        super().__init__([], False)
        self.rounds = rounds
        self.given: list[list[int]] = []

    def apply_outcomes(self, pairs, **_kw):
        verdicts = self.rounds[len(self.given)] if len(self.given) < len(self.rounds) else {}
        seqs = [int(fx.commands[0].args[0]) for _ref, fx in pairs]  # the handler pushes the record's offset
        self.given.append(seqs)
        out = []
        for (ref, _fx), seq in zip(pairs, seqs):
            v = verdicts.get(seq, Outcome.APPLIED)
            out.append(v if isinstance(v, Outcome) else ApplyResult(ref.id, **v))  # type: ignore[arg-type]
        return out


class ResumingConsumer(PausingConsumer):
    def resume(self, _partitions) -> None:
        return None

    def seek(self, _partition) -> None:
        return None


def test_a_dead_letter_acknowledged_after_an_unacknowledged_one_is_not_run_again_on_the_retry() -> None:
    """Offsets 1 and 2 of a partition fail in the script; the dead letter of 1 is not
    acknowledged, that of 2 is. The partition retries from 1: 1 is dead-lettered without running
    (owed), and 2 — already in the dead-letter topic — must neither run again (its effect could
    now apply, after 3's: the order of its aggregate broken, and the event both applied and
    dead-lettered) nor be dead-lettered a second time. Found in review of the per-batch settle."""
    failed = _verdict(FAILED_ACKED)
    engine = RecordingEngine([{1: failed, 2: failed}])
    app = App("g", require_schemas=False)
    app.catch_all(lambda event, fx: fx.rpush("{t:a}:seq", event.payload["seq"]))
    config = ConsumerConfig.load({}, group="g", topics="t", redis_url="redis://127.0.0.1:1/0", kafka_bootstrap="127.0.0.1:1")
    runtime = ConsumerRuntime(app, config, redis_client=redis.Redis(port=1), install_signals=False)
    runtime.engine = engine  # type: ignore[assignment]
    letters = ScriptedDeadLetters({(0, 1)})
    runtime.pipeline.dead_letters = letters  # type: ignore[assignment]
    runtime.partitions.consumer = ResumingConsumer()  # type: ignore[assignment]
    state = runtime.states[("t", 0)] = PartitionState("t", 0)
    pipeline = runtime.pipeline
    try:
        pipeline.launch(pipeline.prepare([Record(0, o) for o in range(4)]))  # type: ignore[misc]
        pipeline.settle()
        assert (state.done, state.resume_offset) == (1, 1)
        letters.refused = set()  # the dead-letter topic is back
        state.resume_at = 0.0
        runtime.partitions.resume_due()
        pipeline.launch(pipeline.prepare([Record(0, o) for o in range(state.resume_offset, 4)]))  # type: ignore[misc]
        pipeline.settle()
    finally:
        pipeline.close()
    assert engine.given[1] == [3], "records re-read on the retry that ran again"
    assert letters.sent == [(0, 1), (0, 2), (0, 1)]
    assert state.done == 4 and not state.owed
    assert runtime.metrics.total("postbox_consumer_dead_lettered_total") == 2


class Redelivered(Record):
    """A record whose event id is its own (the same when the partition reads it again)."""

    def headers(self) -> list[tuple[str, bytes]]:
        return [("id", str(uuid.UUID(int=(self._partition << 64) | self.offset() + 1)).encode()), ("event_type", b"Counted"),
                ("aggregate_type", b"t")]


class MarkerEngine(ScriptedEngine):
    """Keeps dedupe markers like the real engine: an event applied once comes back a duplicate,
    one that failed leaves its verdict in its marker (owed, then delivered once its dead letter is
    noted) and comes back failed earlier without running. The first round's verdicts are scripted
    (by offset); later rounds apply everything else."""

    def __init__(self, first: dict[tuple[int, int], str], transient: bool) -> None:
        super().__init__([], transient)
        self.first = first
        self.rounds = 0
        self.applied: list[tuple[int, int]] = []
        self.markers: set[str] = set()
        #: event id -> delivered? (a failure verdict in its marker)
        self.verdicts: dict[str, bool] = {}

    def apply_outcomes(self, pairs, **_kw):
        self.rounds += 1
        if self.transient and self.rounds == 1:
            raise TransientEffectError("Redis unreachable: scripted", reason="connection")
        out = []
        for ref, fx in pairs:
            where = (uuid.UUID(ref.id).int >> 64, int(fx.commands[0].args[0]))
            fate = self.first.get(where, APPLIED) if self.rounds == 1 else APPLIED
            if ref.id in self.markers:
                out.append(Outcome.DUPLICATE)
            elif ref.id in self.verdicts:
                earlier = Verdict("EffectFailed:WRONGTYPE", "failed earlier", self.verdicts[ref.id])
                out.append(ApplyResult(ref.id, Outcome.FAILED, error="failed earlier", error_class="permanent", earlier=earlier))
            elif fate in (APPLIED, DUPLICATE):
                self.markers.add(ref.id)
                self.applied.append(where)
                out.append(Outcome.DUPLICATE if fate == DUPLICATE else Outcome.APPLIED)
            else:
                v = _verdict(fate)
                if fate != HELD:
                    self.verdicts[ref.id] = False
                out.append(ApplyResult(ref.id, **v))  # type: ignore[arg-type]
        return out

    def record_failures(self, failures) -> list:
        found: list = []
        for ref, _class, _error in failures:
            if ref.id in self.markers:
                found.append(b"1")
            elif ref.id in self.verdicts:
                found.append(b"D..." if self.verdicts[ref.id] else b"F...")
            else:
                self.verdicts[ref.id] = False
                found.append(None)
        return found

    def mark_delivered(self, failures) -> None:
        for ref, _class, _error in failures:
            if ref.id in self.verdicts:
                self.verdicts[ref.id] = True

    def withdraw_failures(self, refs) -> None:
        for ref in refs:
            self.verdicts.pop(ref.id, None)


def _two_rounds(handler, engine: "MarkerEngine", records: list, between_rounds=None, **config_kw) -> tuple[ConsumerRuntime, list]:
    """A runtime whose engine is ``engine`` and whose handler is ``handler`` runs the records once
    with their generated fates, then (after ``between_rounds``) the partitions' retries with the
    dead-letter topic healthy; returns the runtime and the dead letters acknowledged, in order."""
    app = App("g", require_schemas=False)
    app.catch_all(handler)
    config = ConsumerConfig.load({}, group="g", topics="t", redis_url="redis://127.0.0.1:1/0", kafka_bootstrap="127.0.0.1:1", **config_kw)
    runtime = ConsumerRuntime(app, config, redis_client=redis.Redis(port=1), install_signals=False)
    runtime.engine = engine  # type: ignore[assignment]
    letters = ScriptedDeadLetters({(p, o) for p, o, f in records if f == FAILED_UNACKED})
    runtime.pipeline.dead_letters = letters  # type: ignore[assignment]
    runtime.partitions.consumer = ResumingConsumer()  # type: ignore[assignment]
    runtime.pipeline.carry_delay_s = 0.0
    for p in range(PARTITIONS):
        runtime.states[("t", p)] = PartitionState("t", p)
    pipeline = runtime.pipeline
    try:
        pipeline.launch(pipeline.prepare([Redelivered(p, o) for p, o, _f in records]))  # type: ignore[misc]
        pipeline.settle()
        if between_rounds is not None:
            between_rounds()
        sent_first = len(letters.sent)
        acked = [(p, o) for p, o in letters.sent if (p, o) not in letters.refused]
        letters.refused = set()
        for state in runtime.states.values():
            state.resume_at = 0.0 if state.resume_at is not None else None
        runtime.partitions.resume_due()
        again = [Redelivered(p, o) for p, o, _f in records
                 if runtime.states[("t", p)].resume_offset is not None and o >= runtime.states[("t", p)].resume_offset]
        pipeline.launch(pipeline.prepare(again) if again else None)  # type: ignore[arg-type]
        pipeline.settle()
    finally:
        pipeline.close()
    return runtime, acked + letters.sent[sent_first:]  # the dead-letter topic acknowledges everything in the retry


def _assert_each_record_once(engine: "MarkerEngine", acked: list, records: list) -> None:
    assert len(engine.applied) == len(set(engine.applied)), "an event applied twice"
    assert len(acked) == len(set(acked)), f"a dead letter acknowledged twice: {acked}"
    assert not set(engine.applied) & set(acked), "an event both applied and dead-lettered"
    assert set(engine.applied) | set(acked) == {(p, o) for p, o, _f in records}, "a record neither applied nor dead-lettered"


@settings(max_examples=100, deadline=None)
@given(
    per_partition=st.lists(st.lists(FATES, min_size=0, max_size=5), min_size=PARTITIONS, max_size=PARTITIONS),
    transient=st.booleans(),
)
def test_after_the_retries_every_record_is_applied_or_dead_lettered_exactly_once(per_partition, transient) -> None:
    """Two rounds: the first with the generated fates, then the partitions' retries (held records
    carried, paused partitions read again from where they stopped) with Redis and the dead-letter
    topic healthy. Each record is then either applied once or dead-lettered (acknowledged) once,
    never both, and every partition's commit is past its last record."""
    records = [(p, o, f) for p, fates in enumerate(per_partition) for o, f in enumerate(fates)]
    if not records:
        return
    engine = MarkerEngine({(p, o): f for p, o, f in records}, transient)
    runtime, acked = _two_rounds(lambda event, fx: fx.rpush("{t:a}:seq", event.payload["seq"]), engine, records)
    _assert_each_record_once(engine, acked, records)
    for p, fates in enumerate(per_partition):
        if fates:
            assert runtime.states[("t", p)].done == len(fates), (p, fates, transient)


H_PERMANENT, H_TRANSIENT, H_REDEPLOYED = "handler-raises", "handler-retry-once", "handler-raises-after-a-deploy"
ANY_FATE = st.sampled_from([APPLIED, APPLIED, DUPLICATE, FAILED_ACKED, FAILED_UNACKED, HELD, H_PERMANENT, H_TRANSIENT, H_REDEPLOYED])


@settings(max_examples=100, deadline=None)
@given(per_partition=st.lists(st.lists(ANY_FATE, min_size=0, max_size=5), min_size=PARTITIONS, max_size=PARTITIONS))
def test_with_handler_failures_too_every_record_is_applied_or_dead_lettered_exactly_once(per_partition) -> None:
    """As above, with handlers that raise for good (dead-lettered before the apply), ask for a
    retry once (their partition stops there, its later records wait for the next round), or start
    raising after a deploy between the rounds: a record applied in the first round and read again
    in the retry is then a duplicate, never also dead-lettered (shown to fail with the marker check
    before dead-lettering bypassed: "an event both applied and dead-lettered")."""
    from postbox.consumer import Retry

    records = [(p, o, f) for p, fates in enumerate(per_partition) for o, f in enumerate(fates)]
    if not records:
        return
    fates = {(p, o): f for p, o, f in records}
    first_round = [True]  # the dependency is down during the first round only

    def handler(event, fx):
        where = (event.partition, event.payload["seq"])
        if fates[where] == H_PERMANENT:
            raise ValueError("a handler bug")
        if fates[where] == H_TRANSIENT and first_round[0]:
            raise Retry("a dependency is down")
        if fates[where] == H_REDEPLOYED and not first_round[0]:
            raise ValueError("the deployed handler fails on this event")
        fx.rpush("{t:a}:seq", event.payload["seq"])

    engine = MarkerEngine({k: (APPLIED if f in (H_PERMANENT, H_TRANSIENT, H_REDEPLOYED) else f) for k, f in fates.items()}, False)

    def between_rounds() -> None:
        engine.rounds = max(engine.rounds, 1)  # the scripted round is over, even if the engine was not called in it
        first_round[0] = False

    runtime, acked = _two_rounds(handler, engine, records, between_rounds, handler_retries=0)
    _assert_each_record_once(engine, acked, records)
    for p, fates_of in enumerate(per_partition):
        if fates_of:
            assert runtime.states[("t", p)].done == len(fates_of), (p, fates_of)
        if HELD not in fates_of:  # (a held record's successors of its key wait in the engine, which this one does not model)
            order = [o for q, o in engine.applied if q == p]
            assert order == sorted(order), f"partition {p} applied out of order: {order}"


def _runtime_on(engine: "MarkerEngine", refused: set[tuple[int, int]]) -> tuple[ConsumerRuntime, ScriptedDeadLetters]:
    """A consumer process of group g: the group's engine (its markers) and owed verdicts are in
    "Redis" (shared), everything else is its own."""
    app = App("g", require_schemas=False)
    app.catch_all(lambda event, fx: fx.rpush("{t:a}:seq", event.payload["seq"]))
    config = ConsumerConfig.load({}, group="g", topics="t", redis_url="redis://127.0.0.1:1/0", kafka_bootstrap="127.0.0.1:1")
    runtime = ConsumerRuntime(app, config, redis_client=redis.Redis(port=1), install_signals=False)
    runtime.engine = engine  # type: ignore[assignment]
    letters = ScriptedDeadLetters(refused)
    runtime.pipeline.dead_letters = letters  # type: ignore[assignment]
    runtime.partitions.consumer = ResumingConsumer()  # type: ignore[assignment]
    for p in range(PARTITIONS):
        runtime.states[("t", p)] = PartitionState("t", p)
    return runtime, letters


@settings(max_examples=100, deadline=None)
@given(per_partition=st.lists(st.lists(FATES, min_size=0, max_size=5), min_size=PARTITIONS, max_size=PARTITIONS))
def test_a_restart_between_the_rounds_keeps_every_owed_verdict(per_partition) -> None:
    """The process dies after the first round (a crash, a deploy, the partitions moving to another
    member); the next one reads each partition again from its commit. Records whose dead letter
    was not acknowledged, and those dead-lettered after them, are owed: the next process must
    dead-letter them without running them (run again, an effect that failed could now apply after
    its successors) and write no second dead letter. Each record ends applied once or
    dead-lettered once, in order per partition. Shown to fail with the owed verdicts kept in memory
    only (before the verdicts moved into the markers): "partition 2 applied out of order: [1, 0]"
    and "an event both applied and dead-lettered"."""
    records = [(p, o, f) for p, fates in enumerate(per_partition) for o, f in enumerate(fates)]
    if not records:
        return
    engine = MarkerEngine({(p, o): f for p, o, f in records}, False)
    first, letters = _runtime_on(engine, {(p, o) for p, o, f in records if f == FAILED_UNACKED})
    try:
        first.pipeline.launch(first.pipeline.prepare([Redelivered(p, o) for p, o, _f in records]))  # type: ignore[misc]
        first.pipeline.settle()
    finally:
        first.pipeline.close()
    acked = [(p, o) for p, o in letters.sent if (p, o) not in letters.refused]
    commits = {p: first.states[("t", p)].done or 0 for p in range(PARTITIONS)}
    engine.rounds = max(engine.rounds, 1)

    second, letters = _runtime_on(engine, set())
    again = [Redelivered(p, o) for p, o, _f in records if o >= commits[p]]
    try:
        if again:
            second.pipeline.launch(second.pipeline.prepare(again))  # type: ignore[arg-type]
            second.pipeline.settle()
    finally:
        second.pipeline.close()
    _assert_each_record_once(engine, acked + letters.sent, records)
    for p in range(PARTITIONS):
        order = [o for q, o in engine.applied if q == p]
        if HELD not in per_partition[p]:  # (a held record's successors of its key wait in the engine, which this one does not model)
            assert order == sorted(order), f"partition {p} applied out of order: {order}"
        assert not second.states[("t", p)].owed, "a verdict still owed after its dead letter was acknowledged"
    assert all(engine.verdicts.values()), "a verdict left owed in its marker after its dead letter was acknowledged"
