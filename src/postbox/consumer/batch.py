"""The batch model: what became of each record of one batch, and which offset each partition may
commit. Pure (no Kafka, no Redis), so every path is unit-tested without services.

The runtime tells it what happened to each record (applied, a duplicate, dead-lettered with an
acknowledged dead letter) and where a partition must stop (:meth:`Batch.block`: a transient
failure, a dead letter not acknowledged). The model answers two questions:

- :meth:`Batch.runnable`: may this record still be worked on in this batch? Not at or after its
  partition's block: a record never takes effect after a later record of its aggregate.
- :meth:`Batch.positions`: per partition still assigned, the offset to commit — the first record
  that is not finished (every record before it is applied, a duplicate or dead-lettered), or the
  offset after the last record — and the block to retry from, if any.

Why the commit offset is computed from the records' fates rather than from "the last offset of
the batch unless blocked": a record the runtime forgot to report keeps the commit behind it, so a
bug shows up as a redelivery (deduplicated) instead of a record skipped for good.
"""

from __future__ import annotations

import enum
from collections.abc import Container, Iterable
from dataclasses import dataclass, field

from postbox.consumer.blocks import Block, Blocks, TopicPartitionKey


class Fate(enum.Enum):
    """What became of one record in this batch."""

    PENDING = "pending"
    APPLIED = "applied"
    DUPLICATE = "duplicate"
    DEAD_LETTERED = "dead-lettered"


#: The retry reason of a record left pending without a block before it.
UNFINISHED = "unfinished"
#: The fates after which a record's offset may be committed past.
FINISHED = frozenset({Fate.APPLIED, Fate.DUPLICATE, Fate.DEAD_LETTERED})


@dataclass(frozen=True, slots=True)
class Position:
    """One partition's outcome of a batch: the offset to commit, and the block to retry from."""

    commit: int
    retry: Block | None = None


@dataclass
class Batch:
    """The records of one batch per partition (in offset order) and their fates."""

    offsets: dict[TopicPartitionKey, list[int]] = field(default_factory=dict)
    fates: dict[tuple[TopicPartitionKey, int], Fate] = field(default_factory=dict)
    blocks: Blocks = field(default_factory=Blocks)

    @classmethod
    def of(cls, records: Iterable[tuple[TopicPartitionKey, int]]) -> "Batch":
        """A batch of ``(partition, offset)`` records (Kafka hands them out in offset order per partition)."""
        batch = cls()
        for tp, offset in records:
            batch.offsets.setdefault(tp, []).append(offset)
            batch.fates[(tp, offset)] = Fate.PENDING
        return batch

    # -- what happened -------------------------------------------------------------------------------

    def finished(self, tp: TopicPartitionKey, offset: int, fate: Fate) -> None:
        """Record that ``offset`` of ``tp`` is applied, a duplicate or dead-lettered."""
        if fate not in FINISHED:
            raise ValueError(f"{fate} is not a finished fate")
        if (tp, offset) not in self.fates:
            raise KeyError(f"{tp}@{offset} is not in this batch")
        self.fates[(tp, offset)] = fate

    def block(self, tp: TopicPartitionKey, offset: int, reason: str, error: str) -> None:
        """``tp`` stops at ``offset`` (the lowest block wins): retried from there after a backoff."""
        self.blocks.block(tp, offset, reason, error)

    # -- questions -----------------------------------------------------------------------------------

    def covers(self, tp: TopicPartitionKey, offset: int) -> bool:
        """True when ``offset`` is at or after its partition's block."""
        return self.blocks.covers(tp, offset)

    def runnable(self, tp: TopicPartitionKey, offset: int) -> bool:
        """True when the record may still be worked on: pending and before any block."""
        return self.fates.get((tp, offset)) is Fate.PENDING and not self.blocks.covers(tp, offset)

    def fate(self, tp: TopicPartitionKey, offset: int) -> Fate:
        return self.fates[(tp, offset)]

    def get(self, tp: TopicPartitionKey) -> Block | None:
        """The partition's block, if any."""
        return self.blocks.get(tp)

    def position(self, tp: TopicPartitionKey) -> Position:
        """The offset to commit for ``tp`` (the first unfinished record, else after the last) and
        where to retry from: its block, or — a record left pending with no block before it (a
        runtime bug) — that record, so it is re-read rather than skipped."""
        first_unfinished = next((o for o in self.offsets[tp] if self.fates[(tp, o)] not in FINISHED), None)
        block = self.blocks.get(tp)
        if block is not None:
            commit = block.offset if first_unfinished is None else min(first_unfinished, block.offset)
            return Position(commit, block)
        if first_unfinished is not None:
            return Position(first_unfinished, Block(first_unfinished, UNFINISHED, "the record was not reported finished"))
        return Position(self.offsets[tp][-1] + 1)

    def positions(self, assigned: Container[TopicPartitionKey]) -> dict[TopicPartitionKey, Position]:
        """:meth:`position` of every partition of the batch that is still ``assigned`` (a partition
        revoked or lost meanwhile is not committed: its next owner re-reads from its last commit)."""
        return {tp: self.position(tp) for tp in self.offsets if tp in assigned}

    def counts(self) -> dict[str, int]:
        """How many records of the batch ended in each fate (``pending``: left for a retry)."""
        out = {f.value: 0 for f in Fate}
        for fate in self.fates.values():
            out[fate.value] += 1
        return out
