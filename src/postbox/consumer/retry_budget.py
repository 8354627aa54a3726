"""How long one record may keep failing transiently before it is dead-lettered.

A transient handler failure (a dependency down, :class:`~postbox.consumer.Retry`) stops its
partition at the record and retries it with backoff; by default for ever, because dead-lettering
turns an outage into work for the on-call engineer. Some teams prefer a bound (Kafka Connect's
``errors.retry.timeout``, NServiceBus's delayed retries, MassTransit's retry policies): a record
still failing after ``attempts`` tries or ``timeout`` since its first failure is dead-lettered
(``RetriesSpent:<reason>``) and its partition moves on.

The count belongs to the record at one offset of a partition this member owns (a
:class:`Streak` kept in the partition's state): a record that fails, succeeds and fails again
later starts afresh only when another offset fails in between; a partition that moves to
another member starts afresh there. Redis failures of the engine never count: they are the
infrastructure, not the record.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from postbox import failure_classes as classes
from postbox.consumer.dlq_record import Failure


@dataclass(slots=True)
class Streak:
    """The transient failures of the record at ``offset``: how many, since when (monotonic)."""

    offset: int
    since: float
    attempts: int = 0


@dataclass(frozen=True, slots=True)
class RetryBudget:
    """``attempts`` (None: no limit) and ``timeout`` (None: no limit) of a record's transient retries."""

    attempts: int | None = None
    timeout: timedelta | None = None

    @property
    def limited(self) -> bool:
        return self.attempts is not None or self.timeout is not None

    def charge(self, streak: Streak | None, offset: int, now: float) -> Streak:
        """The streak after one more transient failure of the record at ``offset``."""
        if streak is None or streak.offset != offset:
            streak = Streak(offset, now)
        streak.attempts += 1
        return streak

    def spent(self, streak: Streak, now: float) -> bool:
        """Whether the record has used its budget (dead-letter it now)."""
        if self.attempts is not None and streak.attempts >= self.attempts:
            return True
        return self.timeout is not None and now - streak.since >= self.timeout.total_seconds()

    def give_up(self, failure: Failure, streak: Streak, now: float) -> Failure:
        """The permanent failure that dead-letters a record whose transient ``failure`` spent the budget."""
        reason = failure.error_class.split(":", 1)[1] if ":" in failure.error_class else failure.error_class
        waited = now - streak.since
        return Failure(
            classes.retries_spent(reason),
            f"{failure.error} (still failing after {streak.attempts} attempts over {waited:.1f} s: "
            f"the retry budget {self.describe()} is spent)",
            streak.attempts,
        )

    def describe(self) -> str:
        parts = []
        if self.attempts is not None:
            parts.append(f"{self.attempts} attempts")
        if self.timeout is not None:
            parts.append(f"{self.timeout.total_seconds():g} s")
        return " or ".join(parts) or "unlimited"


#: No limit: a transient failure is retried for ever (the default).
UNLIMITED = RetryBudget()

__all__ = ["UNLIMITED", "RetryBudget", "Streak"]
