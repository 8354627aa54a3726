"""Where each partition of a batch stops: a small value the batch fills as it runs.

A partition is *blocked* at the first offset that must not be committed yet (a transient failure,
a dead letter not acknowledged). Nothing at or after that offset is applied later in the same
batch, so a record never takes effect after a later record of its partition (order per aggregate),
and the partition is paused and re-read from there after a backoff.
"""

from __future__ import annotations

from dataclasses import dataclass, field

TopicPartitionKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Block:
    """The first unfinished offset of a partition, and why."""

    offset: int
    reason: str
    error: str


@dataclass
class Blocks:
    """Per partition of one batch: the lowest blocked offset."""

    at: dict[TopicPartitionKey, Block] = field(default_factory=dict)

    def block(self, tp: TopicPartitionKey, offset: int, reason: str, error: str) -> None:
        """Block ``tp`` from ``offset`` on (the lowest offset wins)."""
        current = self.at.get(tp)
        if current is None or offset < current.offset:
            self.at[tp] = Block(offset, reason, error)

    def covers(self, tp: TopicPartitionKey, offset: int) -> bool:
        """True when ``offset`` of ``tp`` is at or after the partition's block."""
        current = self.at.get(tp)
        return current is not None and offset >= current.offset

    def get(self, tp: TopicPartitionKey) -> Block | None:
        return self.at.get(tp)

    def __contains__(self, tp: object) -> bool:
        return tp in self.at
