"""The batch model: what became of each record of one batch, and which offset each partition may
commit. Pure (no Kafka, no Redis), so every path is unit-tested without services.

The runtime tells it what happened to each record (applied, a duplicate, dead-lettered with an
acknowledged dead letter) and where a partition must stop (:meth:`Batch.block`: a transient
failure, a dead letter not acknowledged). The model answers two questions:

- :meth:`Batch.runnable`: may this record still be worked on in this batch? Not at or after its
  partition's block: a record never takes effect after a later record of its aggregate.
- :meth:`Batch.positions`: per partition still assigned, the offset to commit — the first record
  that is not finished (every record before it is applied, a duplicate or dead-lettered), or the
  offset after the last record — the block to retry from, if any, and the records *held*.

A record is *held* (:meth:`Batch.hold`) when it was not applied for a reason of its own while the
rest of its partition could go on: on Redis Cluster, its slot's master is down. It is not a block:
its partition keeps flowing (records after it on the other masters apply; one of its own
aggregate waits with it, see the engine's order keys), it rides along in memory into the next
batch, and the commit stops before it until it is applied. More than ``held_limit`` held records
in one partition turn into a block at the first of them (the old pause-and-seek-back), so memory
stays bounded however long the master is down.

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
    #: Not applied for a reason of its own (its Cluster node down): carried into the next batch.
    HELD = "held"


#: The retry reason of a record left pending without a block before it.
UNFINISHED = "unfinished"
#: The retry reason of a partition holding more than ``held_limit`` records.
HELD_LIMIT = "held-limit"
#: Held records per partition beyond which the partition is blocked at the first of them.
DEFAULT_HELD_LIMIT = 2000
#: The fates after which a record's offset may be committed past.
FINISHED = frozenset({Fate.APPLIED, Fate.DUPLICATE, Fate.DEAD_LETTERED})


@dataclass(frozen=True, slots=True)
class Position:
    """One partition's outcome of a batch: the offset to commit, the block to retry from, and the
    held records to carry into the next batch (those before the block)."""

    commit: int
    retry: Block | None = None
    hold: tuple[int, ...] = ()


@dataclass
class Batch:
    """The records of one batch per partition (in offset order) and their fates.

    Fates are kept per partition (``fates[tp][offset]``), so the common batch — every record
    applied — is marked (:meth:`finish_every`) and its commit found (:meth:`position`) with a few
    C-level passes per partition instead of Python work per record."""

    offsets: dict[TopicPartitionKey, list[int]] = field(default_factory=dict)
    fates: dict[TopicPartitionKey, dict[int, Fate]] = field(default_factory=dict)
    blocks: Blocks = field(default_factory=Blocks)
    held_limit: int = DEFAULT_HELD_LIMIT
    #: Per partition with records carried in: the offset after the last record of the batches
    #: they come from (every record there that is not carried is finished).
    ends: dict[TopicPartitionKey, int] = field(default_factory=dict)
    #: The last reason and error a record of each partition was held for.
    held_why: dict[TopicPartitionKey, tuple[str, str]] = field(default_factory=dict)

    @classmethod
    def of(
        cls, records: Iterable[tuple[TopicPartitionKey, int]], *, held_limit: int = DEFAULT_HELD_LIMIT, ends: dict[TopicPartitionKey, int] | None = None
    ) -> "Batch":
        """A batch of ``(partition, offset)`` records in offset order per partition (held records
        carried from the previous batch first, then Kafka's); ``ends``: :meth:`end` of the batch
        the carried records come from, per partition."""
        batch = cls(held_limit=held_limit, ends=dict(ends or {}))
        offsets = batch.offsets
        for tp, offset in records:
            found = offsets.get(tp)
            if found is None:
                found = offsets[tp] = []
            found.append(offset)
        batch.fates = {tp: dict.fromkeys(found, Fate.PENDING) for tp, found in offsets.items()}
        return batch

    # -- what happened -------------------------------------------------------------------------------

    def finished(self, tp: TopicPartitionKey, offset: int, fate: Fate) -> None:
        """Record that ``offset`` of ``tp`` is applied, a duplicate or dead-lettered."""
        if fate not in FINISHED:
            raise ValueError(f"{fate} is not a finished fate")
        fates = self.fates.get(tp)
        if fates is None or offset not in fates:
            raise KeyError(f"{tp}@{offset} is not in this batch")
        fates[offset] = fate

    def finish_all(self, records: Iterable[tuple[TopicPartitionKey, int]], fate: Fate) -> None:
        """:meth:`finished` for many records with one fate (a batch's applied records, its
        duplicates): the same checks, without a call per record."""
        if fate not in FINISHED:
            raise ValueError(f"{fate} is not a finished fate")
        fates = self.fates
        for tp, offset in records:
            found = fates.get(tp)
            if found is None or offset not in found:
                raise KeyError(f"{tp}@{offset} is not in this batch")
            found[offset] = fate

    def finish_every(self, fate: Fate) -> None:
        """Every record of the batch ended in ``fate`` (the common batch: all applied), marked per
        partition without a Python step per record. Only for a batch none of whose records has a
        fate yet: a record already dead-lettered, held or finished is refused (ValueError), since
        marking it too would hide what became of it."""
        if fate not in FINISHED:
            raise ValueError(f"{fate} is not a finished fate")
        for tp, fates in self.fates.items():
            if list(fates.values()).count(Fate.PENDING) != len(fates):
                raise ValueError(f"{tp}: a record of this batch already has a fate")
        self.fates = {tp: dict.fromkeys(fates, fate) for tp, fates in self.fates.items()}

    def hold(self, tp: TopicPartitionKey, offset: int, reason: str, error: str) -> None:
        """``offset`` of ``tp`` was not applied for a reason of its own: carry it (see the module docs)."""
        fates = self.fates.get(tp)
        if fates is None or fates.get(offset) is not Fate.PENDING:
            raise KeyError(f"{tp}@{offset} is not a pending record of this batch")
        fates[offset] = Fate.HELD
        self.held_why[tp] = (reason, error)

    def block(self, tp: TopicPartitionKey, offset: int, reason: str, error: str) -> None:
        """``tp`` stops at ``offset`` (the lowest block wins): retried from there after a backoff."""
        self.blocks.block(tp, offset, reason, error)

    # -- questions -----------------------------------------------------------------------------------

    def covers(self, tp: TopicPartitionKey, offset: int) -> bool:
        """True when ``offset`` is at or after its partition's block."""
        return self.blocks.covers(tp, offset)

    def runnable(self, tp: TopicPartitionKey, offset: int) -> bool:
        """True when the record may still be worked on: pending and before any block."""
        return self.fates.get(tp, {}).get(offset) is Fate.PENDING and not self.blocks.covers(tp, offset)

    def fate(self, tp: TopicPartitionKey, offset: int) -> Fate:
        return self.fates[tp][offset]

    def get(self, tp: TopicPartitionKey) -> Block | None:
        """The partition's block, if any."""
        return self.blocks.get(tp)

    def position(self, tp: TopicPartitionKey) -> Position:
        """The offset to commit for ``tp`` (the first unfinished record, else after the last),
        where to retry from — its block; the first of more than ``held_limit`` held records; or a
        record left pending with no block before it (a runtime bug), so it is re-read rather than
        skipped — and the held records before that point, to carry into the next batch."""
        block = self.blocks.get(tp)
        fates = self.fates[tp].values()
        if block is None and Fate.PENDING not in fates and Fate.HELD not in fates:
            return Position(self.end(tp))  # every record finished: the common case, no walk
        first_unfinished, held, pending = self._unfinished(tp)
        block = block or self._held_block(tp, held) or _pending_block(pending)
        hold = tuple(o for o in held if block is None or o < block.offset)
        if block is not None:
            commit = block.offset if first_unfinished is None else min(first_unfinished, block.offset)
            return Position(commit, block, hold)
        if first_unfinished is not None:
            return Position(first_unfinished, None, hold)
        return Position(self.end(tp))

    def _unfinished(self, tp: TopicPartitionKey) -> tuple[int | None, list[int], int | None]:
        """The partition's first unfinished offset, its held ones and its first pending one, in
        one pass (a partition with a record not finished: a block, a held or a pending record)."""
        fates = self.fates[tp]
        first: int | None = None
        pending: int | None = None
        held: list[int] = []
        for offset in self.offsets[tp]:
            fate = fates[offset]
            if fate is Fate.APPLIED or fate is Fate.DUPLICATE or fate is Fate.DEAD_LETTERED:  # FINISHED, without hashing the enum
                continue
            if first is None:
                first = offset
            if fate is Fate.HELD:
                held.append(offset)
            elif pending is None:
                pending = offset
        return first, held, pending

    def end(self, tp: TopicPartitionKey) -> int:
        """The offset after the last record of ``tp`` this batch (or the one its carried records
        come from) saw: the commit once every record is finished."""
        return max(self.offsets[tp][-1] + 1, self.ends.get(tp, 0))

    def _held_block(self, tp: TopicPartitionKey, held: list[int]) -> Block | None:
        if len(held) <= self.held_limit:
            return None
        reason, error = self.held_why.get(tp, ("", ""))
        return Block(held[0], HELD_LIMIT, f"{len(held)} records held back (limit {self.held_limit}), the last for {reason}: {error}")

    def positions(self, assigned: Container[TopicPartitionKey]) -> dict[TopicPartitionKey, Position]:
        """:meth:`position` of every partition of the batch that is still ``assigned`` (a partition
        revoked or lost meanwhile is not committed: its next owner re-reads from its last commit)."""
        return {tp: self.position(tp) for tp in self.offsets if tp in assigned}

    def counts(self) -> dict[str, int]:
        """How many records of the batch ended in each fate (``pending``: left for a retry)."""
        out = {f.value: 0 for f in Fate}
        for fates in self.fates.values():
            for fate in fates.values():
                out[fate.value] += 1
        return out

    def __len__(self) -> int:
        """The records of the batch (each once)."""
        return sum(map(len, self.fates.values()))


def _pending_block(pending: int | None) -> Block | None:
    """A record left pending with no block before it (a runtime bug) is re-read, not skipped."""
    return None if pending is None else Block(pending, UNFINISHED, "the record was not reported finished")
