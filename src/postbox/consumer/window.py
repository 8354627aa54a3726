"""A bounded window run: apply the records of each partition from a start offset to an end offset,
through the normal runtime path, without joining the consumer group and without committing.

``postbox consume MODULE:APP --from SPEC --until SPEC`` and ``postbox replay --until … --execute``
use it to re-apply (or catch up on) a slice of history. Why it is safe beside the live group: the
effects still go through the group's engine, so every event meets the group's dedupe marker —
an event the group already applied comes back as a *duplicate* and changes nothing, an event not
applied yet is applied once (whichever of the window and the live group gets there first, the
other one meets the marker) — and in each aggregate's order, provided it starts at or before the
group's committed offsets, which the commands check before it runs
(:mod:`postbox.incident.window_order`). Why it never commits: the group's offsets say what the
*group* has consumed; a window that moved them would make the live group skip or re-read records.

What differs from a group member, all behind :class:`WindowAssignment` (see
:mod:`postbox.consumer.assignment`):

- partitions are *assigned* explicitly at their start offsets (no subscription, no rebalance);
  the Kafka client uses a group id of its own, so nothing it does can touch the group's offsets;
- :class:`WindowConsumer` hands the loop only records before each partition's end, and pauses a
  partition once it read past its end (its own end-of-partition event counts as "past the end" too:
  a window ending at the high watermark, or at a gap in the offsets, still finishes);
- :class:`WindowPartitions` commits nothing and counts each record's fate once (applied,
  duplicate, dead-lettered) when its partition's finished position moves past it;
- the loop ends when every partition read past its end and finished every record before it.

Transient failures behave as in a group member (pause, back off, seek back, retry); permanent ones
are dead-lettered to ``<topic>.dlq`` as usual.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from postbox.consumer.backoff import Backoff
from postbox.consumer.batch import FINISHED, Batch, Fate, Position
from postbox.consumer.blocks import TopicPartitionKey
from postbox.consumer.logs import log_event
from postbox.consumer.metrics import Metrics
from postbox.consumer.partition_state import PartitionState
from postbox.consumer.partitions import Partitions
from postbox.errors import ConfigError

log = logging.getLogger("postbox.consumer")

#: Exit code of a window run stopped (SIGTERM/SIGINT) before every partition reached its end:
#: nothing was committed, so running the same window again finishes it (applied events are duplicates).
EXIT_WINDOW_INCOMPLETE = 4

#: Suffix of the Kafka group id of a window's client: never the group's own id, so no commit or
#: offset lookup of the window can reach the group's offsets (the markers stay the group's).
WINDOW_CLIENT_GROUP_SUFFIX = ".window"


@dataclass(frozen=True)
class Span:
    """One partition's window: records at offsets ``start`` ≤ offset < ``end``."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def key(self) -> TopicPartitionKey:
        return (self.topic, self.partition)

    @property
    def records(self) -> int:
        """Offsets in the window (records, unless the topic has gaps: compaction, transactions)."""
        return max(0, self.end - self.start)


@dataclass
class Tally:
    """What became of one partition's window records, each counted once."""

    span: Span
    applied: int = 0
    duplicate: int = 0
    dead_lettered: int = 0
    #: Every finished record below this offset is counted.
    counted_to: int = 0
    #: The highest offset inside the window the loop was handed (None: none yet).
    last_read: int | None = None
    #: The client read past the window's end (a record at/after it, or the partition's end).
    read_past_end: bool = False
    #: Finished fates of records not counted yet (their partition's position is still before them):
    #: the first fate wins, so a record applied and later redelivered as a duplicate counts as applied.
    pending: dict[int, Fate] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.counted_to = self.span.start

    def saw(self, batch: Batch, position: Position | None) -> None:
        """Note the fates of this partition's records in ``batch``; count those before ``position``."""
        tp = self.span.key
        for offset, fate in batch.fates.get(tp, {}).items():
            if fate in FINISHED and self.counted_to <= offset < self.span.end:
                self.pending.setdefault(offset, fate)
        if position is None or position.commit <= self.counted_to:
            return
        for offset in [o for o in self.pending if o < position.commit]:
            fate = self.pending.pop(offset)
            if fate is Fate.APPLIED:
                self.applied += 1
            elif fate is Fate.DUPLICATE:
                self.duplicate += 1
            else:
                self.dead_lettered += 1
        self.counted_to = position.commit

    def complete(self, done: int | None) -> bool:
        """True when every record of the window is finished: the finished position reached the end,
        or the client read past the end and every record it handed over is finished."""
        if done is not None and done >= self.span.end:
            return True
        if not self.read_past_end:
            return False
        return self.last_read is None or (done is not None and done > self.last_read)

    def as_dict(self) -> dict[str, Any]:
        s = self.span
        return {"topic": s.topic, "partition": s.partition, "start": s.start, "end": s.end, "records": s.records,
                "applied": self.applied, "duplicate": self.duplicate, "dead_lettered": self.dead_lettered}

    def line(self, reached: bool) -> str:
        """One line of the run's summary."""
        s = self.span
        if s.records == 0:
            return f"{s.topic}[{s.partition}] empty window at offset {s.start}: nothing to apply"
        where = f"{s.topic}[{s.partition}] offsets {s.start}..{s.end - 1}"
        counts = f"applied {self.applied}, duplicate {self.duplicate}, dead-lettered {self.dead_lettered}"
        return f"{where}: {counts}" + ("" if reached else f" (stopped before the end, at offset {self.counted_to})")


class WindowPartitions(Partitions):
    """The partitions of a window run: assigned once, never committed (the group's offsets stay
    where they are), each record's fate counted in its :class:`Tally`.

    The group's failure verdicts bind a window as they bind the group's members: they are in the
    events' markers (:mod:`postbox.effects.verdicts`), which the window's engine reads and writes
    as the group's. A record the group failed is dead-lettered (if its dead letter is still owed)
    or finished, never run after its successors; a failure the window finds is left for the group."""

    def __init__(self, group: str, metrics: Metrics, backoff: Backoff, tallies: dict[TopicPartitionKey, Tally]) -> None:
        super().__init__(group, metrics, backoff)
        self.tallies = tallies

    def assign_window(self, consumer: Consumer) -> None:
        """Assign every non-empty span at its start offset (no group, no rebalance callbacks)."""
        spans = [t.span for t in self.tallies.values() if t.span.records > 0]
        consumer.assign([TopicPartition(s.topic, s.partition, s.start) for s in spans])
        for s in spans:
            self.states[s.key] = PartitionState(s.topic, s.partition)
        self.assigned_once = True
        self.refresh_gauges()
        log_event(log, logging.INFO, "window assigned", group=self.group,
                  partitions=",".join(f"{s.topic}[{s.partition}]@{s.start}..{s.end}" for s in spans))  # fmt: skip

    def finish(self, batch: Batch) -> dict[TopicPartitionKey, Position]:
        positions = super().finish(batch)
        for tp in batch.offsets:
            tally = self.tallies.get(tp)
            if tally is not None:
                tally.saw(batch, positions.get(tp))
        return positions

    def commit(self, *, sync: bool = False, only: Any = None) -> bool:
        """Nothing is committed by a window: its progress lives in the tallies."""
        return True

    def final_commit(self) -> None:
        """Nothing to commit (see :meth:`commit`)."""

    def update_lag(self) -> None:
        """No lag gauge: the window is not the group's position."""


class WindowConsumer(Consumer):
    """The Kafka client of a window run: ``consume`` returns only records before their partition's
    end and pauses a partition that read past it; ``unsubscribe`` (the runtime's orderly leave)
    drops the assignment."""

    tallies: dict[TopicPartitionKey, Tally]
    watch: "GoneWatch"

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        self.watch.check(self, self.tallies)
        kept = []
        past: dict[TopicPartitionKey, TopicPartition] = {}
        for msg in super().consume(num_messages, timeout):
            tally = self.tallies.get((msg.topic(), msg.partition()))  # type: ignore[arg-type]
            if tally is None:
                kept.append(msg)  # an error not tied to a window partition: the pipeline handles it
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF and (msg.offset() or 0) >= tally.span.end:
                    tally.read_past_end = True
                kept.append(msg)
                continue
            offset = msg.offset() or 0
            if offset >= tally.span.end:
                tally.read_past_end = True
                past[tally.span.key] = TopicPartition(tally.span.topic, tally.span.partition)
                continue
            tally.last_read = offset if tally.last_read is None else max(tally.last_read, offset)
            kept.append(msg)
        if past:
            # nothing more to read there, also after a transient retry resumed it and sought back
            self.pause(list(past.values()))
        return kept

    def unsubscribe(self) -> None:
        self.unassign()


class GoneWatch:
    """Stops a window whose topic (or partition) disappeared while it ran. A group member waits for
    a missing topic to come back, but a window's partitions were fixed when it started, and a
    deleted one can never reach its end: the run would wait for ever (found by review). librdkafka
    says so only to the client's ``error_cb`` (no record carries it), so the callback raises a
    suspicion and the next ``consume`` asks the broker's metadata before raising ConfigError (exit 3)."""

    #: The client errors that may mean a partition is gone.
    SUSPICIOUS = frozenset({KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART})

    def __init__(self) -> None:
        self.suspected = False

    def wrap(self, error_cb: Any) -> Any:
        """``error_cb`` that also raises the suspicion."""

        def on_error(err: KafkaError) -> None:
            if err.code() in self.SUSPICIOUS:
                self.suspected = True
            if error_cb is not None:
                error_cb(err)

        return on_error

    def check(self, consumer: Consumer, tallies: dict[TopicPartitionKey, Tally]) -> None:
        """ConfigError naming the first unfinished window partition that no longer exists."""
        if not self.suspected:
            return
        self.suspected = False
        for tally in tallies.values():
            s = tally.span
            if s.records == 0 or tally.read_past_end:
                continue
            try:
                topic = consumer.list_topics(s.topic, timeout=5).topics.get(s.topic)
            except KafkaException:
                self.suspected = True  # the broker did not answer: ask again at the next consume
                return
            if topic is None or topic.error is not None or s.partition not in topic.partitions:
                raise ConfigError(f"topic {s.topic} is gone (deleted during the window?): partition {s.partition} "
                                  f"cannot reach the window's end at offset {s.end}",
                                  fix="recreate the topic from its source, or run the window on the topics that exist")  # fmt: skip


class WindowAssignment:
    """The :class:`~postbox.consumer.assignment.Assignment` of a window run over ``spans``."""

    on_signal = "finishing the batch and stopping the window (it commits nothing: run it again to finish it)"

    def __init__(self, spans: list[Span]) -> None:
        self.tallies = {s.key: Tally(s) for s in spans}
        self.book: WindowPartitions | None = None
        self.watch = GoneWatch()

    def partitions(self, group: str, metrics: Metrics, backoff: Backoff) -> Partitions:
        self.book = WindowPartitions(group, metrics, backoff, self.tallies)
        return self.book

    def configure(self, conf: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in conf.items() if k != "group.instance.id"}  # no membership, static or not
        out["group.id"] = f"{conf['group.id']}{WINDOW_CLIENT_GROUP_SUFFIX}"
        out["enable.partition.eof"] = True  # a window ending at the partition's end learns it reached it
        out["error_cb"] = self.watch.wrap(conf.get("error_cb"))  # a deleted topic is said only there
        return out

    def client(self, conf: dict[str, Any]) -> Consumer:
        consumer = WindowConsumer(conf)
        consumer.tallies = self.tallies
        consumer.watch = self.watch
        return consumer

    def start(self, consumer: Consumer, topics: list[str], partitions: Partitions) -> None:
        assert isinstance(partitions, WindowPartitions)
        partitions.assign_window(consumer)

    def finished(self) -> bool:
        return all(self.reached(t) for t in self.tallies.values())

    def reached(self, tally: Tally) -> bool:
        """True when ``tally``'s partition finished every record of its window."""
        if tally.span.records == 0:
            return True
        state = self.book.states.get(tally.span.key) if self.book is not None else None
        return state is not None and tally.complete(state.done)

    def summary(self) -> list[tuple[Tally, bool]]:
        """Each partition's tally and whether it reached its end, in topic/partition order."""
        return [(self.tallies[k], self.reached(self.tallies[k])) for k in sorted(self.tallies)]


__all__ = ["EXIT_WINDOW_INCOMPLETE", "GoneWatch", "Span", "Tally", "WindowAssignment", "WindowConsumer", "WindowPartitions"]
