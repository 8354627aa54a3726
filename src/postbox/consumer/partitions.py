"""The partitions one consumer owns: their states, and everything done to them on the Kafka client —
pause, resume and seek, offset commits, and the rebalance callbacks.

Around one value per partition (:class:`~postbox.consumer.partition_state.PartitionState`: the
offset every record before which is finished, what was sent and confirmed, its backoff). The batch
flow (:mod:`postbox.consumer.pipeline`) tells it where each batch ended per partition
(:meth:`Partitions.finish`); the loop asks it to commit, resume what is due, and how long to poll.

Rebalance safety with an apply in flight (the apply of batch N runs in a worker thread while the
loop reads batch N+1): a revoke or loss first calls ``settle`` — it waits for that apply and
records its outcome — so a revoked partition is committed exactly up to what was applied or
dead-lettered, never past it, and nothing applied is left out of its final commit. A lost
partition is never committed (another member may own it already).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from postbox import failure_classes as classes
from postbox.consumer.backoff import Backoff
from postbox.consumer.batch import Batch, Position
from postbox.consumer.blocks import TopicPartitionKey
from postbox.consumer.dlq_record import one_line
from postbox.consumer.logs import log_event
from postbox.consumer.metrics import Metrics
from postbox.consumer.partition_state import PartitionState, pending

log = logging.getLogger("postbox.consumer")

#: Commit failures that mean "this member's view of the group is stale": never fatal, the
#: partitions' next owner re-reads from the last committed offset and its duplicates are skipped.
REBALANCE_COMMIT_ERRORS = {
    KafkaError.REBALANCE_IN_PROGRESS,
    KafkaError.ILLEGAL_GENERATION,
    KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError.FENCED_INSTANCE_ID,
    KafkaError._ASSIGNMENT_LOST,
}
LAG_INTERVAL_S = 5.0
#: Synchronous commit attempts at shutdown before giving up (the records are then redelivered).
FINAL_COMMIT_ATTEMPTS = 5
#: Longest poll while every partition waits out a backoff (a stop request is noticed this fast).
PAUSED_POLL_S = 0.5


class Partitions:
    """The assigned partitions of one consumer (see the module docs). ``consumer`` is set once the
    Kafka client is open; ``settle`` is called before a revoke or loss hands partitions over."""

    def __init__(self, group: str, metrics: Metrics, backoff: Backoff) -> None:
        self.group = group
        self.metrics = metrics
        self.backoff = backoff
        self.states: dict[TopicPartitionKey, PartitionState] = {}
        self.consumer: Consumer | None = None
        self.settle: Callable[[], None] = lambda: None
        #: Called after partitions were dropped (revoked, lost, a rejoin): forget their held records.
        self.dropped: Callable[[], None] = lambda: None
        self.assigned_once = False
        self._next_lag = 0.0

    # -- questions of the batch flow -------------------------------------------------------------

    def flowing(self, key: TopicPartitionKey) -> bool:
        """True when records of ``key`` may be worked on: assigned and not waiting out a backoff
        (its other records are fetched again from the right offset)."""
        state = self.states.get(key)
        return state is not None and state.resume_at is None

    def poll_timeout(self, batch_wait_s: float) -> float:
        """How long ``consume`` may wait: the batch wait, or until the soonest resume when every
        partition is paused."""
        states = self.states.values()
        if states and all(s.resume_at is not None for s in states):
            soonest = min(s.resume_at for s in states if s.resume_at is not None)
            return max(0.0, min(PAUSED_POLL_S, soonest - time.monotonic()))
        return batch_wait_s

    # -- where a batch ended ----------------------------------------------------------------------

    def finish(self, batch: Batch) -> dict[TopicPartitionKey, Position]:
        """Move each still-assigned partition's commit position to what the batch model says is
        finished; pause the ones to retry (a partition revoked meanwhile is left alone). Returns
        the positions (their held records are carried into the next batch)."""
        positions = batch.positions(self.states)
        for tp, position in positions.items():
            state = self.states[tp]
            state.done = position.commit if state.done is None else max(state.done, position.commit)
            if position.retry is not None:
                self.pause(state, position.retry.offset, position.retry.reason, position.retry.error)
            else:
                state.failures = 0
        return positions

    def pause(self, state: PartitionState, offset: int, reason: str, error: str) -> None:
        """Stop ``state``'s partition at ``offset`` for a jittered backoff, then seek back there."""
        assert self.consumer is not None
        state.failures += 1
        delay = self.backoff.delay(state.failures)
        if state.resume_at is None:
            self.consumer.pause([TopicPartition(state.topic, state.partition)])
        state.resume_at = time.monotonic() + delay
        state.resume_offset = offset
        state.last_error = error
        self.metrics.retries.labels(self.group, reason).inc()
        self.metrics.failures.labels(self.group, state.topic, classes.transient(reason), classes.TRANSIENT).inc()
        self.refresh_gauges()
        log_event(log, logging.WARNING, "transient failure: partition paused, will retry from its first unfinished record",
                  topic=state.topic, partition=state.partition, offset=offset, reason=reason, error=one_line(error, 300),
                  attempt=state.failures, retry_in_s=round(delay, 2))

    def resume_due(self) -> None:
        """Resume the partitions whose backoff is over and seek them back to their first unfinished record."""
        now = time.monotonic()
        due = [s for s in self.states.values() if s.resume_at is not None and s.resume_at <= now]
        if not due:
            return
        assert self.consumer is not None
        for state in due:
            tp = TopicPartition(state.topic, state.partition)
            self.consumer.resume([tp])
            if state.resume_offset is not None:
                try:
                    self.consumer.seek(TopicPartition(state.topic, state.partition, state.resume_offset))
                except KafkaException as exc:
                    # Not fetchable yet (e.g. just assigned): pause again briefly.
                    self.consumer.pause([tp])
                    state.resume_at = now + self.backoff.base_s
                    log.debug("seek %s[%d]@%d failed (%s); retrying", state.topic, state.partition, state.resume_offset, exc)
                    continue
            state.resume_at = None
            log_event(log, logging.INFO, "partition resumed", topic=state.topic, partition=state.partition, offset=state.resume_offset, attempt=state.failures)
        self.refresh_gauges()

    # -- rebalance callbacks (run inside consume()) ---------------------------------------------

    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        consumer.incremental_assign(partitions)
        consumer.resume(partitions)  # a partition paused before it was revoked starts fresh
        self.assigned_once = True
        for tp in partitions:
            self.states[(tp.topic, tp.partition)] = PartitionState(tp.topic, tp.partition)
        self.metrics.rebalances.labels(self.group, "assigned").inc(len(partitions))
        self.refresh_gauges()
        if partitions:  # the cooperative protocol also calls with nothing new: say only what was added
            log_event(log, logging.INFO, "partitions assigned", partitions=show(partitions), total=len(self.states))

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # The apply in flight is settled first, so every state's ``done`` is final: commit exactly
        # what was applied or dead-lettered.
        self.settle()
        keys = [(tp.topic, tp.partition) for tp in partitions]
        self.commit(sync=True, only=keys)
        self._drop(keys, "revoked")
        log_event(log, logging.INFO, "partitions revoked", partitions=show(partitions), total=len(self.states))

    def on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Lost (session expired): another member may own them already; committing would fail or,
        # worse, move its offsets. Drop the state; the new owner re-reads from the last commit.
        self.settle()
        self._drop([(tp.topic, tp.partition) for tp in partitions], "lost")
        log_event(log, logging.WARNING, "partitions lost (session timed out); their uncommitted records go to the next owner", partitions=show(partitions))

    def _drop(self, keys: list[TopicPartitionKey], kind: str) -> None:
        for key in keys:
            self.states.pop(key, None)
            try:
                self.metrics.lag.remove(self.group, key[0], str(key[1]))
            except KeyError:
                pass
        self.metrics.rebalances.labels(self.group, kind).inc(len(keys))
        self.refresh_gauges()
        self.dropped()

    def drop_all(self) -> None:
        """Forget every partition (the Kafka client is replaced: a rejoin after a fence); nothing
        more is committed for them by this member."""
        self.states.clear()
        self.refresh_gauges()
        self.dropped()

    def on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """librdkafka's answer to an asynchronous commit."""
        failed = [tp for tp in partitions if tp.error is not None]
        if err is None and not failed:
            self.metrics.commits.labels(self.group, "ok").inc()
            self._outcome(partitions, confirmed=True)
            return
        error = err if err is not None else failed[0].error
        code = error.code() if error is not None else None
        if code == KafkaError._NO_OFFSET:
            return
        self.metrics.commits.labels(self.group, "rebalance" if code in REBALANCE_COMMIT_ERRORS else "error").inc()
        for tp in failed or partitions:
            state = self.states.get((tp.topic, tp.partition))
            if state is not None:
                state.commit_failed()
        # During a rebalance (ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS) this is expected: the
        # revoke callback commits synchronously with the new generation.
        level = logging.INFO if code in REBALANCE_COMMIT_ERRORS else logging.WARNING
        log_event(log, level, "async offset commit failed; the next commit resends it (a new owner would redeliver past it and skip the duplicates)",
                  error=str(error), partitions=show(failed or partitions))

    # -- offsets ------------------------------------------------------------------------------------

    def commit(self, *, sync: bool = False, only: Iterable[TopicPartitionKey] | None = None) -> bool:
        """Commit what is finished: asynchronously in steady state (past what was sent);
        synchronously on revoke and shutdown (past what the broker confirmed). Returns False when
        a commit failed and is worth retrying (not a rebalance refusal: those are final)."""
        if self.consumer is None:
            return True
        states = [self.states[k] for k in (only if only is not None else list(self.states)) if k in self.states]
        offsets = [TopicPartition(s.topic, s.partition, o) for s in states if (o := s.to_commit(confirmed=sync)) is not None]
        if not offsets:
            return True
        try:
            if sync:
                result = self.consumer.commit(offsets=offsets, asynchronous=False) or []
                bad = [tp for tp in result if tp.error is not None]
                if bad:
                    raise KafkaException(bad[0].error)
                self.metrics.commits.labels(self.group, "ok").inc()
                self._outcome(offsets, confirmed=True)
            else:
                self.consumer.commit(offsets=offsets, asynchronous=True)
                self._outcome(offsets, confirmed=False)
        except KafkaException as exc:
            return self._refused(exc, offsets)
        return True

    def final_commit(self) -> None:
        """Shutdown: commit synchronously everything applied that the broker has not confirmed
        (async commits in flight included), retrying a failed commit with backoff."""
        for attempt in range(1, FINAL_COMMIT_ATTEMPTS + 1):
            if self.commit(sync=True) and not pending(self.states.values()):
                return
            time.sleep(self.backoff.delay(attempt))
        left = pending(self.states.values())
        if left:
            log_event(log, logging.ERROR, "final offset commit failed; records after the last commit will be redelivered and skipped as duplicates",
                      partitions=",".join(f"{s.topic}[{s.partition}]@{s.done}" for s in left), attempts=FINAL_COMMIT_ATTEMPTS)

    def _outcome(self, offsets: list[TopicPartition], *, confirmed: bool) -> None:
        for tp in offsets:
            state = self.states.get((tp.topic, tp.partition))
            if state is None or tp.offset < 0:
                continue
            if confirmed:
                state.commit_confirmed(tp.offset)
            else:
                state.commit_sent(tp.offset)

    def _refused(self, exc: KafkaException, offsets: list[TopicPartition]) -> bool:
        error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        code = error.code() if error is not None else None
        if code == KafkaError._NO_OFFSET:
            return True
        if code in REBALANCE_COMMIT_ERRORS:
            self.metrics.commits.labels(self.group, "rebalance").inc()
            log_event(log, logging.WARNING, "offset commit refused during a rebalance; the next owner redelivers past the last commit and skips the duplicates",
                      error=str(exc), partitions=show(offsets))
            return True
        self.metrics.commits.labels(self.group, "error").inc()
        log_event(log, logging.ERROR, "offset commit failed; will retry", error=str(exc), partitions=show(offsets))
        return False

    # -- gauges --------------------------------------------------------------------------------------

    def refresh_gauges(self) -> None:
        self.metrics.assigned.labels(self.group).set(len(self.states))
        self.metrics.paused.labels(self.group).set(sum(1 for s in self.states.values() if s.paused))

    def update_lag(self) -> None:
        """Every :data:`LAG_INTERVAL_S`: high watermark minus the finished position, per partition."""
        now = time.monotonic()
        if now < self._next_lag or self.consumer is None:
            return
        self._next_lag = now + LAG_INTERVAL_S
        for state in list(self.states.values()):
            try:
                _low, high = self.consumer.get_watermark_offsets(TopicPartition(state.topic, state.partition), cached=True)
            except KafkaException:
                continue
            if high is None or high < 0:
                continue
            position = state.done if state.done is not None else state.acked
            if position is not None:
                self.metrics.lag.labels(self.group, state.topic, str(state.partition)).set(max(0, high - position))


def show(partitions: Iterable[TopicPartition]) -> str:
    """``topic[0]@12,topic[1]`` for logs."""
    return ",".join(f"{tp.topic}[{tp.partition}]" + (f"@{tp.offset}" if tp.offset >= 0 else "") for tp in partitions)


__all__ = ["FINAL_COMMIT_ATTEMPTS", "REBALANCE_COMMIT_ERRORS", "Partitions", "show"]
