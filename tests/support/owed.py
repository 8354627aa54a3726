"""An in-memory stand-in for :class:`postbox.consumer.owed_store.OwedStore`, for the unit tests
that run the pipeline without Redis. It keeps what a save wrote, as the Redis hash would (a
partition owing nothing: no entry), so a second runtime given the same store is the partition's
next owner after a restart."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from postbox.consumer.blocks import TopicPartitionKey
from postbox.consumer.owed_store import Loaded
from postbox.consumer.partition_state import PartitionState


class MemoryOwedStore:
    def __init__(self) -> None:
        self.saved: dict[TopicPartitionKey, Loaded] = {}
        self.saves = 0

    def load(self, tps: Sequence[TopicPartitionKey]) -> dict[TopicPartitionKey, Loaded]:
        return {tp: dict(self.saved.get(tp, {})) for tp in tps}

    def save(self, states: Iterable[PartitionState]) -> None:
        self.saves += 1
        for state in states:
            if state.owed:
                self.saved[state.key()] = {o: (f, state.owed_ids.get(o)) for o, f in state.owed.items()}
            else:
                self.saved.pop(state.key(), None)
