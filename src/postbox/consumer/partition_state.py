"""One assigned partition's state between batches, and which offsets to commit for it.

Two commit positions are kept because an asynchronous commit is only *sent* when ``commit``
returns; the broker may still refuse it, and a consumer that closes right after has no chance to
hear so. ``sent`` stops the steady state from re-sending the same offset every loop; ``acked`` (the
broker confirmed it: the commit callback, or a synchronous commit) is what the revoke callback and
shutdown compare against, so they commit synchronously whatever is not confirmed yet.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from postbox.consumer.dlq_record import Failure
from postbox.consumer.retry_budget import Streak


@dataclass(eq=False)
class PartitionState:
    topic: str
    partition: int
    #: The next offset to commit: every record before it is applied or dead-lettered.
    done: int | None = None
    #: The last offset sent in a commit (None: none sent, or the last one failed: send again).
    sent: int | None = None
    #: The last offset the broker confirmed (None: none confirmed yet).
    acked: int | None = None
    #: Monotonic time at which a paused partition resumes; None while running.
    resume_at: float | None = None
    #: Where a paused partition restarts (its first unfinished record).
    resume_offset: int | None = None
    #: Consecutive transient failures (backoff exponent); 0 after a finished batch.
    failures: int = 0
    #: The transient failures of the record the partition is stopped at (its retry budget).
    streak: Streak | None = None
    last_error: str = ""
    #: Records whose effect failed after later records of the partition were applied and whose
    #: dead letter is not acknowledged yet, or dead-lettered records read again behind an earlier
    #: one: offset → verdict, finished on the retry without being run again. This process's
    #: shortcut: the verdict that binds every reader is in the event's marker
    #: (:mod:`postbox.effects.verdicts`).
    owed: dict[int, Failure] = field(default_factory=dict)

    def owe(self, offset: int, failure: Failure) -> None:
        """Keep ``failure`` as the verdict of the record at ``offset``."""
        self.owed[offset] = failure

    def paid(self, offset: int) -> None:
        """The record at ``offset`` is finished: its verdict is owed no more."""
        self.owed.pop(offset, None)

    @property
    def paused(self) -> bool:
        return self.resume_at is not None

    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    def to_commit(self, *, confirmed: bool) -> int | None:
        """The offset to commit now, if any: past what was sent (steady state), or past what the
        broker confirmed (``confirmed``: revoke and shutdown, which must not rely on a commit
        still in flight)."""
        if self.done is None:
            return None
        reference = self.acked if confirmed else self.sent
        return self.done if self.done != reference else None

    def commit_sent(self, offset: int) -> None:
        self.sent = offset

    def commit_confirmed(self, offset: int) -> None:
        self.sent = offset if self.sent is None else max(self.sent, offset)
        self.acked = offset if self.acked is None else max(self.acked, offset)

    def commit_failed(self) -> None:
        self.sent = self.acked  # send again with the next commit


def pending(states: Iterable[PartitionState]) -> list[PartitionState]:
    """Partitions with applied offsets the broker has not confirmed."""
    return [s for s in states if s.to_commit(confirmed=True) is not None]
