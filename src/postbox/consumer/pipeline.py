"""The flow of one batch through the consumer's parts, with Python work overlapping the Redis wait.

Three steps per batch, all on the loop's thread except the apply itself:

1. :meth:`Pipeline.prepare` — the records of partitions that are flowing
   (:meth:`Partitions.flowing <postbox.consumer.partitions.Partitions.flowing>`), each decoded and
   routed (:mod:`postbox.consumer.decoding`) and its handler run (:mod:`postbox.consumer.invoke`),
   into a :class:`~postbox.consumer.batch.Batch`. This runs **while the previous batch's apply is
   in flight**: decoding and handlers only describe effects, they touch neither Redis nor offsets.
2. :meth:`Pipeline.launch` — once the previous batch is settled: records of partitions it stopped
   (a transient failure paused them) or that were revoked meanwhile are left out (read again from
   the right offset); records it *held* (Redis Cluster: their node is down, see
   :meth:`Batch.hold <postbox.consumer.batch.Batch.hold>`) go first, ahead of Kafka's, so a held
   record still precedes the later records of its key; the batch model is built over them
   (:class:`~postbox.consumer.batch.Batch`); failures known so far are dead-lettered
   (acknowledged) first; the rest goes to the **apply worker**, one thread running
   ``engine.apply`` (per node and partial on a cluster) + the durability check.
3. :meth:`Pipeline.settle` — wait for that apply, record each record's fate, dead-letter effect
   failures, and tell :class:`~postbox.consumer.partitions.Partitions` where each partition ended
   (which is what gets committed). Also called by the revoke and lost callbacks and at shutdown,
   so no partition changes hands, and no final commit is made, with its apply still in flight.

Why a thread and not asyncio: the engine and redis-py are synchronous, and what is overlapped is a
socket wait (Redis runs the scripts and fsyncs the AOF), during which the thread holds no GIL.
Order per partition holds because there is one worker and batch N+1 is launched only after batch
N settled; an offset is committed only after its apply was acknowledged and found durable.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Any

import redis
from confluent_kafka import KafkaError, KafkaException, Message

from postbox import failure_classes as classes
from postbox.codec import EventHeaders
from postbox.consumer.app import Route
from postbox.consumer.batch import DEFAULT_HELD_LIMIT, Batch, Fate, Position
from postbox.consumer.blocks import Blocks, TopicPartitionKey
from postbox.consumer.retry_budget import UNLIMITED, RetryBudget
from postbox.consumer.deadletter import DeadLetters
from postbox.consumer.decoding import Decoder
from postbox.consumer.dlq_record import Failure, Origin
from postbox.consumer.fencing import is_fence
from postbox.consumer.invoke import HandlerFailed, Invoker, Job
from postbox.consumer import tracing
from postbox.consumer.logs import event_context, log_event
from postbox.consumer.metrics import Metrics
from postbox.consumer.observation import Observer, notify, settled_records
from postbox.consumer.partitions import Partitions
from postbox.consumer.dlq_record import REPLAY_OF_HEADER
from postbox.effects import ApplyResult, Effects, EffectsEngine, EventRef
from postbox.effects.keys import ReplayRef
from postbox.effects.verdicts import is_verdict, parse_verdict
from postbox.effects import Outcome as ApplyOutcome
from postbox.errors import EffectEngineError, TransientEffectError
from postbox.events import Event

log = logging.getLogger("postbox.consumer")


class Item:
    """One record on its way through a batch."""

    __slots__ = ("msg", "tp", "offset", "received", "origin", "event", "route", "ref", "fx", "failure", "exc")

    def __init__(self, msg: Message, tp: tuple[str, int], offset: int, received: float = 0.0) -> None:
        self.msg = msg
        self.tp = tp
        self.offset = offset
        #: When its batch came out of ``consume()`` (wall clock; for the observer).
        self.received = received
        self.origin: Origin | None = None
        self.event: Event | None = None
        self.route: Route | None = None
        self.ref: EventRef | None = None
        self.fx: Effects | None = None
        self.failure: Failure | None = None
        #: The handler exception behind ``failure`` (its traceback is logged with the dead letter).
        self.exc: BaseException | None = None

    @property
    def permanent(self) -> bool:
        return self.failure is not None and self.failure.kind == classes.PERMANENT

    def where(self) -> dict[str, Any]:
        return {"topic": self.tp[0], "partition": self.tp[1], "offset": self.offset}


@dataclass
class Prepared:
    """A batch decoded and through its handlers, not launched yet; ``blocks``: where a handler's
    transient failure stopped a partition."""

    items: list[Item]
    blocks: Blocks


#: One event's verdict from :meth:`EffectsEngine.apply_outcomes`: the outcome itself when it
#: applied or was a duplicate, its full result otherwise (failed, retry).
Verdict = ApplyOutcome | ApplyResult


@dataclass(frozen=True)
class Applied:
    """What the worker hands back: the verdicts, and when the apply started and ended (the metric,
    and the apply spans when tracing is on)."""

    results: list[Verdict]
    started_ns: int
    ended_ns: int

    @property
    def seconds(self) -> float:
        return (self.ended_ns - self.started_ns) / 1e9


@dataclass
class InFlight:
    """A launched batch: ``future`` is its apply in the worker (None: nothing to apply)."""

    items: list[Item]
    to_apply: list[Item]
    batch: Batch
    future: "Future[Applied] | None"
    #: Every record of the batch is applied here (``to_apply`` is all of ``items``): the common case.
    whole: bool = False


class Pipeline:
    """Prepare, launch and settle batches (see the module docs). ``dead_letters`` and ``decoder``
    are set at start-up; ``on_kafka_error`` gets the errors ``consume`` hands out as records."""

    def __init__(self, *, group: str, engine: EffectsEngine, invoker: Invoker, partitions: Partitions, metrics: Metrics,
                 decoder: Decoder, require_durable: bool, on_kafka_error: Callable[[KafkaError], None],
                 held_limit: int = DEFAULT_HELD_LIMIT, carry_delay_s: float = 0.2, observer: Observer | None = None,
                 retry_budget: RetryBudget = UNLIMITED) -> None:
        self.group = group
        #: How long one record may fail transiently before it is dead-lettered (default: for ever).
        self.retry_budget = retry_budget
        self.engine = engine
        self.invoker = invoker
        self.partitions = partitions
        self.metrics = metrics
        self.decoder = decoder
        self.require_durable = require_durable
        self.on_kafka_error = on_kafka_error
        self.dead_letters: DeadLetters | None = None
        self.held_limit = held_limit
        self.carry_delay_s = carry_delay_s
        #: Told of each settled batch's finished records (:mod:`postbox.consumer.observation`).
        self.observer = observer
        #: Records held back by a Redis Cluster node that is down: decoded and handled, they ride
        #: into the next launch ahead of Kafka's records until they apply.
        self._carried: list[Item] = []
        self._carried_ends: dict[TopicPartitionKey, int] = {}
        self._carried_due = 0.0
        partitions.dropped = self._forget_dropped
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="postbox-apply")
        self._in_flight: InFlight | None = None
        self._topics: dict[str, tuple[Any, Any, Any, Any]] = {}
        self._apply_seconds = metrics.apply_seconds.labels(group)

    # -- 1. prepare -----------------------------------------------------------------------------------

    def prepare(self, messages: list[Message]) -> Prepared | None:
        """Decode, route and run the handlers of the records that may be worked on."""
        items = self._take(messages)
        if not items:
            return None
        blocks = Blocks()
        owing = {tp: state for tp, state in self.partitions.states.items() if state.owed}
        decode = self.decoder.message  # no Origin per record: one is made for a failure only (_origin)
        for item in items:
            outcome = decode(item.msg)
            if isinstance(outcome, Failure):
                item.failure = outcome
            else:
                item.event, item.route, item.ref = outcome
                if REPLAY_OF_HEADER in item.event.headers:  # sent again on purpose: not bound by a verdict
                    item.ref = ReplayRef.of(item.ref)
            owed = owing[item.tp].owed.get(item.offset) if owing and item.tp in owing else None
            if owed is not None:  # it failed earlier; only its dead letter is left (its ref: to note it in the marker)
                item.failure = owed
        self._run_handlers(items, blocks)
        return Prepared(items, blocks)

    def _take(self, messages: list[Message]) -> list[Item]:
        items: list[Item] = []
        append = items.append
        flowing: dict[TopicPartitionKey, bool] = {}  # asked once per partition and batch
        received = time.time()  # the batch just came out of consume()
        for msg in messages:
            err = msg.error()
            if err is not None:
                self._record_error(err)
                continue
            tp: TopicPartitionKey = (msg.topic(), msg.partition())  # type: ignore[assignment]  # set on a record without an error (cast() is a call per record)
            ok = flowing.get(tp)
            if ok is None:
                ok = flowing[tp] = self.partitions.flowing(tp)
            if ok:
                append(Item(msg, tp, msg.offset(), received))  # type: ignore[arg-type]  # likewise
        if items:
            self.metrics.batch_size.labels(self.group).observe(len(items))
            topics = {topic for topic, _ in flowing}  # per partition, not per record
            counts = {topics.pop(): len(items)} if len(topics) == 1 else Counter(i.tp[0] for i in items)
            for topic, count in counts.items():
                self._topic(topic)[0].inc(count)
        return items

    def _run_handlers(self, items: list[Item], blocks: Blocks) -> None:
        """Sync handlers in offset order (a transient failure stops its partition there); the async
        ones of the batch gathered on the consumer's loop."""
        pending: list[tuple[Item, Job]] = []
        call = self.invoker.caller()  # tracing looked up once per batch
        for item in items:
            route, event = item.route, item.event
            if route is None or event is None or item.failure is not None or (blocks.at and blocks.covers(item.tp, item.offset)):
                continue
            if route.is_async:
                pending.append((item, (route.handler, route.name, event, route.transient)))
                continue
            outcome = call(route.handler, route.name, event, route.transient)
            if isinstance(outcome, HandlerFailed):
                self._settle_failed(item, outcome, blocks)
            else:
                item.fx = outcome  # the common case, without a call
        if pending:
            for (item, _), outcome in zip(pending, self.invoker.gather([job for _, job in pending])):
                if isinstance(outcome, HandlerFailed):
                    self._settle_failed(item, outcome, blocks)
                else:
                    item.fx = outcome

    def _settle_failed(self, item: Item, outcome: HandlerFailed, blocks: Blocks) -> None:
        """Record a handler's failure: a transient one stops the partition at this record, unless
        the record has spent its retry budget (then it is dead-lettered like a permanent one)."""
        failure = outcome.failure
        if failure.kind == classes.TRANSIENT and self.retry_budget.limited:
            state = self.partitions.states.get(item.tp)
            if state is not None:
                now = time.monotonic()
                state.streak = self.retry_budget.charge(state.streak, item.offset, now)
                if self.retry_budget.spent(state.streak, now):
                    failure = self.retry_budget.give_up(failure, state.streak, now)
        item.failure, item.exc = failure, outcome.exc
        if failure.kind == classes.TRANSIENT:
            blocks.block(item.tp, item.offset, "handler", failure.error)

    # -- 2. launch --------------------------------------------------------------------------------------

    def carried_due(self) -> bool:
        """True when held records wait and their retry delay is over (launch them without new records)."""
        return bool(self._carried) and time.monotonic() >= self._carried_due

    def launch(self, prepared: Prepared | None) -> None:
        """Build the batch (held records first), dead-letter the failures known so far, then hand
        the rest to the worker. Call only when nothing is in flight (:meth:`settle` first)."""
        assert self._in_flight is None, "launch() with a batch still in flight"
        fresh = self._still_flowing(prepared.items) if prepared is not None else []
        items, self._carried = self._carried + fresh, []  # records the batch before stopped are left out
        if not items:
            return
        batch = Batch.of(((i.tp, i.offset) for i in items), held_limit=self.held_limit, ends=self._carried_ends)
        for tp, block in (prepared.blocks.at.items() if prepared is not None else ()):
            if tp in batch.offsets:
                batch.block(tp, block.offset, block.reason, block.error)
        permanent = [i for i in items if i.failure is not None and i.permanent]
        if permanent:
            self._dead_letter(*self._not_applied_before(permanent, batch), batch)
        to_apply = [i for i in items if i.fx is not None and i.failure is None]
        if batch.blocks.at:  # a partition stopped: nothing at or after its block is applied
            to_apply = [i for i in to_apply if not batch.covers(i.tp, i.offset)]
        pairs = [(i.ref, i.fx) for i in to_apply]
        future = self._worker.submit(self._apply, pairs, self._per_node(to_apply)) if to_apply else None  # type: ignore[arg-type]  # to_apply items all carry a ref and effects
        self._in_flight = InFlight(items, to_apply, batch, future, whole=len(to_apply) == len(items))

    def _still_flowing(self, items: list[Item]) -> list[Item]:
        """The prepared records whose partition still flows (not revoked, not stopped by the batch
        settled since they were prepared); asked once per partition."""
        flowing = {tp: self.partitions.flowing(tp) for tp in {i.tp for i in items}}
        return items if all(flowing.values()) else [i for i in items if flowing[i.tp]]

    def _per_node(self, items: list[Item]) -> dict[str, Any]:
        """On Redis Cluster, apply partially (a node that is down holds back only its records, see
        :meth:`Batch.hold`), keeping each partition's Kafka key in order across nodes."""
        if not self.engine.cluster:
            return {}
        return {"partial": True, "order": [(i.tp, i.msg.key()) for i in items]}

    def _forget_dropped(self) -> None:
        """Forget the held records of partitions no longer assigned (their next owner re-reads
        them from the last commit, which is before them)."""
        states = self.partitions.states
        self._carried = [i for i in self._carried if i.tp in states]
        self._carried_ends = {tp: end for tp, end in self._carried_ends.items() if tp in states}

    def _apply(self, pairs: list[tuple[EventRef, Effects]], per_node: dict[str, Any]) -> Applied:
        """In the worker: one engine.apply (its outcomes: no result object per event that went
        well), then the durability check (``require_durable``)."""
        started_ns = time.time_ns()
        try:
            results = self.engine.apply_outcomes(pairs, **per_node)
            self._require_durable()
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise TransientEffectError(f"Redis unreachable: {exc}", reason="connection") from exc
        return Applied(results, started_ns, time.time_ns())

    def _require_durable(self) -> None:
        """With ``require_durable``, raise (transient: retried, never committed past) unless
        Redis is durable: asked before anything applied or found applied is committed."""
        durability = self.engine.durability()
        if not durability.durable and self.require_durable:
            raise TransientEffectError(f"Redis is {durability}", reason="not-durable")

    # -- 3. settle --------------------------------------------------------------------------------------

    def settle(self) -> bool:
        """Wait for the batch in flight and record how it ended; False when none was in flight.
        An engine or configuration error of its apply is raised here (nothing of it is committed)."""
        flight, self._in_flight = self._in_flight, None
        if flight is None:
            return False
        results: list[Verdict] = []
        applied: Applied | None = None
        if flight.future is not None:
            try:
                applied = flight.future.result()
            except TransientEffectError as exc:  # each partition stops at its first record applied here
                for item in flight.to_apply:
                    flight.batch.block(item.tp, item.offset, exc.reason, str(exc))
            else:
                results = applied.results
                self._apply_seconds.observe(applied.seconds)
                if tracing.enabled():
                    tracing.record_applies([(i.event, _outcome_name(r)) for i, r in zip(flight.to_apply, results) if i.event is not None],
                                           self.group, applied.started_ns, applied.ended_ns)  # fmt: skip
                failed = self._account(flight.to_apply, results, flight.batch, whole=flight.whole)
                self._dead_letter(failed, None, flight.batch, owe=True)
        if log.isEnabledFor(logging.DEBUG):
            log_batch(flight.items, results, flight.batch)
        if self.observer is not None:
            now = time.time()
            acknowledged = applied.ended_ns / 1e9 if applied is not None else now
            notify(self.observer, settled_records(flight.items, flight.batch, acknowledged, now, _event_id))
        positions = self.partitions.finish(flight.batch)
        self._owe_delivered(flight.items, flight.batch, positions)
        self._carry(flight.items, flight.batch, positions)
        return True

    def _owe_delivered(self, items: list[Item], batch: Batch, positions: dict[TopicPartitionKey, Position]) -> None:
        """Dead-lettered records at or after their partition's commit are read again: by the retry
        of a partition that stopped before them (a dead letter not acknowledged, a transient
        failure), or, behind a held record, by the partition's next reader after a restart. Those
        are owed as delivered, so that reader finishes them without running them again (their
        effect could now apply, after later events of their aggregate) or writing a second dead
        letter. Verdicts of records the commit has passed are paid: nobody reads those again."""
        states = self.partitions.states
        for tp in positions:
            state = states.get(tp)
            if state is not None and state.owed and state.done is not None:
                for offset in [o for o in state.owed if o < state.done]:
                    state.paid(offset)
        behind = {tp: position.commit for tp, position in positions.items() if position.retry is not None or position.hold}
        if not behind:
            return
        for item in items:
            at = behind.get(item.tp)
            if at is None or item.offset < at or item.failure is None or batch.fate(item.tp, item.offset) is not Fate.DEAD_LETTERED:
                continue
            if item.offset not in states[item.tp].owed:
                states[item.tp].owe(item.offset, replace(item.failure, recorded=True, delivered=True))

    def _carry(self, items: list[Item], batch: Batch, positions: dict[TopicPartitionKey, Position]) -> None:
        """Keep the held records for the next launch (each partition's commit stops before them)."""
        held = {(tp, offset) for tp, position in positions.items() for offset in position.hold}
        self._carried = [i for i in items if (i.tp, i.offset) in held] if held else []
        self._carried_ends = {tp: batch.end(tp) for tp, position in positions.items() if position.hold and position.retry is None}
        if self._carried:
            self._carried_due = time.monotonic() + self.carry_delay_s

    def close(self) -> None:
        """Stop without settling (the consumer stops on an error): wait for the apply in flight,
        record nothing of it — its records are redelivered and come back as duplicates."""
        self._in_flight = None
        self._worker.shutdown(wait=True)

    def _account(self, items: list[Item], results: list[Verdict], batch: Batch, *, whole: bool = False) -> list[Item]:
        """Each applied record's fate; metrics counted once per topic and batch (the end-to-end
        latencies in one :meth:`~postbox.consumer.metrics.BatchHistogram.observe_many`). Returns
        the records whose effect failed (to dead-letter).

        Per batch rather than per record (this runs for every applied event): the outcomes are
        read once, the applied records picked out in one comprehension, and the rare others
        (duplicates, held, failed) go through :meth:`_account_others`. Those are done first: an
        effect whose undo failed stops the consumer before anything of the batch is counted.
        ``whole``: ``items`` are every record of ``batch``; when each of them applied (the common
        batch) the batch model marks them all at once (:meth:`Batch.finish_every`) and the
        per-topic counts come from its partitions."""
        applied_outcome = ApplyOutcome.APPLIED
        if len(results) == len(items) and results.count(applied_outcome) == len(items):  # verdicts: the outcome itself
            applied = items  # a record without a result (never: one per event) stays pending, as with zip below
            failed: list[Item] = []
        else:
            whole = False
            outcomes = [_outcome(r) for r in results]
            applied = [i for i, o in zip(items, outcomes) if o is applied_outcome]
            failed = self._account_others([(i, r) for i, r, o in zip(items, results, outcomes) if o is not applied_outcome], batch)
        if not applied:
            return failed
        if whole:
            batch.finish_every(Fate.APPLIED)
            per_topic: Counter[str] = Counter()
            for (topic, _), offsets in batch.offsets.items():
                per_topic[topic] += len(offsets)
        else:
            batch.finish_all([(i.tp, i.offset) for i in applied], Fate.APPLIED)
            per_topic = Counter([i.tp[0] for i in applied])
        self.metrics.end_to_end_seconds.observe_many(_latencies(applied))
        for topic, count in per_topic.items():
            self._topic(topic)[1].inc(count)
        return failed

    def _account_others(self, others: list[tuple[Item, Verdict]], batch: Batch) -> list[Item]:
        """The records of a batch not applied: duplicates finished, held records carried, failed
        effects returned (to dead-letter)."""
        duplicates: Counter[str] = Counter()
        skipped: list[tuple[TopicPartitionKey, int]] = []
        failed: list[Item] = []
        for item, result in others:
            if _outcome(result) is ApplyOutcome.DUPLICATE:
                skipped.append((item.tp, item.offset))
                duplicates[item.tp[0]] += 1
            elif not isinstance(result, ApplyResult):  # never: a failure or a retry comes as its result
                raise EffectEngineError(f"the engine gave event {_event_id(item)} the verdict {result!r} without its result")
            elif result.retry:
                batch.hold(item.tp, item.offset, result.reason or "retry", result.error or "")
            else:
                _effect_failed(item, result)
                failed.append(item)
        batch.finish_all(skipped, Fate.DUPLICATE)
        for topic, count in duplicates.items():
            self._topic(topic)[2].inc(count)
        return failed

    # -- dead letters -----------------------------------------------------------------------------------

    def _dead_letter(self, failed: list[Item], fresh: "set[int] | None", batch: Batch, *, owe: bool = False) -> None:
        """Failure stream, then ``<topic>.dlq`` (acknowledged). A record whose dead letter is not
        written blocks its partition there; with ``owe`` (effect failures: records after it are
        already applied) its verdict is kept, so the retry dead-letters it without running it
        again — it can never take effect after a later event of its aggregate. Without: the
        verdicts written for this attempt (``fresh``: ids of the items) are withdrawn, so the retry
        runs the record in its place."""
        failed = [i for i in failed if not batch.covers(i.tp, i.offset)]
        if failed and any(i.failure is not None and i.failure.delivered for i in failed):
            failed = self._finish_delivered(failed, batch)
        if not failed:
            return
        assert self.dead_letters is not None
        letters = [(_origin(i), i.failure) for i in failed if i.failure is not None]
        try:
            self.dead_letters.record(self.engine, [(o, _event_id(i), f) for i, (o, f) in zip(failed, letters)])
        except TransientEffectError as exc:
            for item in failed:
                self._owe(item, owe)
                batch.block(item.tp, item.offset, exc.reason, str(exc))
            self._withdraw([i for i in failed if fresh and id(i) in fresh])
            return
        delivered: list[Item] = []
        for item, error in zip(failed, self.dead_letters.send(letters)):
            state = self.partitions.states.get(item.tp)
            if error is None:
                batch.finished(item.tp, item.offset, Fate.DEAD_LETTERED)
                self._dead_lettered(item)
                delivered.append(item)
                if state is not None:
                    state.paid(item.offset)
            else:
                self._owe(item, owe)
                batch.block(item.tp, item.offset, "dlq", error)
        if fresh and len(delivered) < len(failed):
            sent = {id(i) for i in delivered}
            self._withdraw([i for i in failed if id(i) in fresh and id(i) not in sent])
        self._note_delivered(delivered)

    def _withdraw(self, items: list[Item]) -> None:
        """Withdraw the verdicts written for records whose dead letter was not written (see
        :meth:`EffectsEngine.withdraw_failures`); not withdrawn, the retry dead-letters them."""
        refs = [i.ref for i in items if i.ref is not None]
        if refs:
            _best_effort(lambda: self.engine.withdraw_failures(refs), [r.id for r in refs], "failure verdicts of records not "
                         "dead-lettered could not be withdrawn: the retry dead-letters them without running them")

    def _note_delivered(self, items: list[Item]) -> None:
        """Mark the verdicts of acknowledged dead letters as delivered in their markers, so a
        reader of the record after a commit that did not land finishes it without a second dead
        letter. Not noted (Redis unreachable): that dead letter may be written again; the event
        never runs again either way (the verdict stays)."""
        noted = [(i.ref, i.failure.error_class, i.failure.error) for i in items if i.ref is not None and i.failure is not None]
        if noted:
            _best_effort(lambda: self.engine.mark_delivered(noted), [ref.id for ref, _, _ in noted],
                         "dead letters acknowledged but not noted in their markers: a redelivery would write them again")

    def _not_applied_before(self, failed: list[Item], batch: Batch) -> tuple[list[Item], set[int]]:
        """Leave each handler failure's verdict in its event's marker before anything after it is
        applied (:meth:`EffectsEngine.record_failures`), so whoever reads the event next — after a
        crash, a commit that never landed, in a window run — dead-letters it instead of running it
        after its successors. What the marker said before decides the rest:

        - the group applied the event: a redelivery, not poison — finished as a duplicate (counted
          and logged as such), never dead-lettered. A handler changed between delivery and
          redelivery may raise on an event it applied the first time (DESIGN: the marker is met
          whatever the handler does now). Committed, so it waits for durability as an apply's
          duplicates do (the engine confirms the markers found; ``require_durable``);
        - an earlier verdict whose dead letter was acknowledged: finished, not sent again.

        Returns the records left to dead-letter, and the ids of those whose verdict was written
        now. Redis unreachable, WAITAOF unconfirmed or Redis not durable: their partitions stop
        there (retried)."""
        asked = [i for i in failed if i.ref is not None and i.failure is not None and not batch.covers(i.tp, i.offset)]
        if not asked:
            return failed, set()
        try:
            found = self.engine.record_failures([(i.ref, i.failure.error_class, i.failure.error) for i in asked])  # type: ignore[misc,union-attr]
            if any(value is not None for value in found):
                self._require_durable()
        except TransientEffectError as exc:
            for item in asked:
                batch.block(item.tp, item.offset, exc.reason, str(exc))
            return failed, set()  # _dead_letter leaves out what the blocks cover
        duplicates = [i for i, value in zip(asked, found) if value is not None and not is_verdict(value)]
        delivered = [i for i, value in zip(asked, found) if value is not None and is_verdict(value) and parse_verdict(value).delivered]
        if delivered:
            batch.finish_all([(i.tp, i.offset) for i in delivered], Fate.DEAD_LETTERED)
        if duplicates:
            self._skip_applied(duplicates, batch)
        fresh = {id(i) for i, value in zip(asked, found) if value is None}
        done = {id(i) for i in duplicates + delivered}
        return ([i for i in failed if id(i) not in done] if done else failed), fresh

    def _skip_applied(self, duplicates: list[Item], batch: Batch) -> None:
        """Finish handler failures on events the group applied before as duplicates (see above)."""
        batch.finish_all([(i.tp, i.offset) for i in duplicates], Fate.DUPLICATE)
        for item in duplicates:
            self._topic(item.tp[0])[2].inc()
            failure = item.failure
            with event_context(item.event) if item.event is not None else nullcontext():
                log_event(log, logging.WARNING, "handler failed on a redelivered event this group already applied: "
                          "skipped as a duplicate, not dead-lettered", event_id=_event_id(item),
                          error_class=failure.error_class if failure else None, error=failure.error if failure else None,
                          **item.where())

    def _finish_delivered(self, failed: list[Item], batch: Batch) -> list[Item]:
        """Finish the records whose dead letter was acknowledged before (owed as delivered, see
        :meth:`_owe_delivered`; counted and logged then); return the others, to dead-letter."""
        rest: list[Item] = []
        for item in failed:
            if item.failure is None or not item.failure.delivered:
                rest.append(item)
                continue
            batch.finished(item.tp, item.offset, Fate.DEAD_LETTERED)
            state = self.partitions.states.get(item.tp)
            if state is not None:
                state.paid(item.offset)
        return rest

    def _owe(self, item: Item, owe: bool) -> None:
        state = self.partitions.states.get(item.tp)
        if owe and state is not None and item.failure is not None:
            state.owe(item.offset, replace(item.failure, recorded=True))

    def _dead_lettered(self, item: Item) -> None:
        """Counted and logged once, when its dead letter is acknowledged: a record whose dead
        letter is retried (not acknowledged, or its partition blocked before it) is not counted
        again on the retry."""
        failure = item.failure
        assert failure is not None
        self._topic(item.tp[0])[3].inc()
        self.metrics.failures.labels(self.group, item.tp[0], failure.error_class, failure.kind).inc()
        with event_context(item.event) if item.event is not None else nullcontext():
            log_event(log, logging.WARNING, "permanent failure: dead-lettered", error_class=failure.error_class, error=failure.error,
                      event_id=_event_id(item), attempts=failure.attempts, **item.where(),
                      **({"exc_info": item.exc} if item.exc is not None else {}))  # fmt: skip

    # -- helpers ------------------------------------------------------------------------------------------

    def _topic(self, topic: str) -> tuple[Any, Any, Any, Any]:
        """The topic's consumed / applied / duplicates / dead-lettered counters (labels resolved once)."""
        found = self._topics.get(topic)
        if found is None:
            g, m = self.group, self.metrics
            found = self._topics[topic] = (
                m.consumed.labels(g, topic), m.applied.labels(g, topic), m.duplicates.labels(g, topic), m.dead_lettered.labels(g, topic)
            )
        return found

    def _record_error(self, err: KafkaError) -> None:
        if err.code() == KafkaError._PARTITION_EOF:
            return
        if err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            log.debug("topic not there yet: %s", err)
            return
        if err.fatal() and not is_fence(err, True):
            raise KafkaException(err)
        self.on_kafka_error(err)


def _effect_failed(item: Item, result: ApplyResult) -> None:
    """Record an effect that failed inside the script (already undone there): a permanent failure
    to dead-letter, or — its undo failed too — the engine error that stops the consumer."""
    if result.undo_error:
        result.raise_for_failure()  # EffectEngineError: the consumer stops
    if result.earlier is not None:  # the group's verdict, found in its marker: it did not run now
        verdict = result.earlier
        item.failure = Failure(verdict.error_class, verdict.error, 1, recorded=True, delivered=verdict.delivered)
        item.fx = None
        return
    code = classes.CROSS_SLOT if result.cross_slot else classes.redis_error_code(result.error)
    where = f" at command {result.command_index} ({result.command})" if result.command_index is not None else ""
    item.failure = Failure(classes.effect_failed(code), f"effect failed{where}: {result.error}", 1, recorded=not result.cross_slot)
    item.fx = None


def _best_effort(write: Callable[[], None], events: list[str], warning: str) -> None:
    """Run a marker write whose failure loses nothing but a shortcut (Redis unreachable: logged)."""
    try:
        write()
    except TransientEffectError as exc:
        log_event(log, logging.WARNING, warning, error=str(exc), events=events)


def _latencies(applied: list[Item]) -> list[float]:
    """Seconds from each applied event's creation (its ``created_at`` header, when it has one) to
    now; never negative (a producer's clock ahead of ours counts as 0)."""
    now = time.time()
    return [age if (age := now - created.timestamp()) > 0.0 else 0.0
            for i in applied if i.event is not None and (created := i.event.created_at) is not None]  # fmt: skip


def _outcome(verdict: Verdict) -> ApplyOutcome:
    return verdict if isinstance(verdict, ApplyOutcome) else verdict.outcome


def _outcome_name(verdict: Verdict) -> str:
    """``applied``, ``duplicate``, ``failed``, or ``retry`` (held back by a Redis Cluster node that is down)."""
    return _outcome(verdict).value


def _origin(item: Item) -> Origin:
    if item.origin is None:
        item.origin = Origin.of(item.msg)
    return item.origin


def _event_id(item: Item) -> str | None:
    """The event's id, or the record's ``id`` header when it could not be decoded."""
    if item.event is not None:
        return item.event.id
    for key, value in _origin(item).headers:
        if key == "id" and value:
            return EventHeaders.parse([(key, value)]).event_id
    return None


def log_batch(items: list[Item], results: list[Verdict], batch: Batch) -> None:
    """One DEBUG line per batch with its outcome counts, before its offsets are committed.

    Metrics die with a SIGKILLed process; these lines stay in its log, so the fault suite can
    sum, across every process of a run, how many records were seen, applied, and absorbed as
    duplicates by the dedupe marker (``retried``: records left for a transient retry)."""
    log_event(
        log, logging.DEBUG, "batch finished",
        records=len(items),
        applied=sum(1 for r in results if _outcome(r) is ApplyOutcome.APPLIED),
        duplicates=sum(1 for r in results if _outcome(r) is ApplyOutcome.DUPLICATE),
        failed=sum(1 for i in items if i.failure is not None and i.failure.kind == classes.PERMANENT),
        retried=sum(1 for i in items if batch.covers(i.tp, i.offset)),
        partitions=",".join(f"{t}[{p}]" for t, p in sorted({i.tp for i in items})),
    )


__all__ = ["InFlight", "Item", "Pipeline", "Prepared", "log_batch"]
