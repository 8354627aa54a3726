"""How long a record can come back, and the marker TTL that must outlive it: the contract.

Why: "exactly once" holds only while the dedupe marker of an applied event exists. A record can be
delivered again as long as it is in the log, and a group re-reads it when its committed offsets are
gone (``auto.offset.reset=earliest``): after ``offsets.retention.minutes`` of being empty, or a
reset. Once the marker has expired, that re-read applies the event a second time.

How long a record stays in the log: Kafka deletes whole segments, a segment only once its newest
record is older than ``retention.ms``, and a segment is rolled ``segment.ms`` after its first
record; deletion runs every ``log.retention.check.interval.ms``. So a record lives at most
``retention.ms + segment.ms + log.retention.check.interval.ms`` (``segment.bytes`` only rolls
earlier). With Kafka's defaults (7 days, 7 days) that is two weeks, longer than the 8-day markers.

The inequality every group must satisfy (``postbox doctor`` checks it, per group, against the
topics the group consumes and the broker's settings)::

    marker_ttl >= retention.ms + segment.ms + log.retention.check.interval.ms
    marker_ttl >= offsets.retention.minutes

The first is what bounds every redelivery; the second keeps a group's offsets from outliving its
markers, so an idle group that comes back with its offsets intact is never the only thing standing
between a record and a second apply. ``retention.ms = -1`` (keep forever) cannot be covered.

The shipped configuration (local stack, docker compose, the connector's topic creation settings)
keeps 7 days + 12 hours + 5 minutes and 7 days of offsets inside the 8-day default marker TTL;
``tests/unit/test_redelivery_contract.py`` reads those files and checks them against this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

#: What the shipped configuration sets (kafka.properties, docker-compose.yml, connector topic creation).
TOPIC_RETENTION = timedelta(days=7)
SEGMENT_ROLL = timedelta(hours=12)
RETENTION_CHECK_INTERVAL = timedelta(minutes=5)
OFFSETS_RETENTION = timedelta(days=7)


@dataclass(frozen=True)
class RedeliveryWindow:
    """The numbers that decide how long a record can come back to a group (None = forever)."""

    retention: timedelta | None
    segment: timedelta
    check_interval: timedelta
    offsets_retention: timedelta
    source: str = ""  # where the topic numbers come from (a topic name, or "broker defaults")

    @property
    def record_lifetime(self) -> timedelta | None:
        """The longest a record can stay in the log (None: it is never deleted)."""
        if self.retention is None:
            return None
        return self.retention + self.segment + self.check_interval

    @property
    def bound(self) -> timedelta | None:
        """The marker TTL must be at least this (None: no TTL is enough)."""
        lifetime = self.record_lifetime
        return None if lifetime is None else max(lifetime, self.offsets_retention)

    def explain(self) -> str:
        retention = "forever (-1)" if self.retention is None else human(self.retention)
        where = f"{self.source}: " if self.source else ""
        return (f"{where}retention.ms {retention} + segment.ms {human(self.segment)} + "
                f"log.retention.check.interval.ms {human(self.check_interval)}; "
                f"offsets.retention.minutes {human(self.offsets_retention)}")


def shortfall(marker_ttl: timedelta, window: RedeliveryWindow) -> str | None:
    """Why ``marker_ttl`` does not cover ``window``, or None when it does."""
    bound = window.bound
    if bound is None:
        return f"records are kept forever ({window.explain()}): no marker TTL covers them"
    if marker_ttl < bound:
        return f"marker TTL {human(marker_ttl)} < redelivery window {human(bound)} ({window.explain()})"
    return None


def shipped_window() -> RedeliveryWindow:
    """The window of the shipped configuration (what the default marker TTL must cover)."""
    return RedeliveryWindow(TOPIC_RETENTION, SEGMENT_ROLL, RETENTION_CHECK_INTERVAL, OFFSETS_RETENTION, "shipped defaults")


def human(delta: timedelta) -> str:
    """``7d 12h 5m``, ``20s``, ``1.5s``: durations as people compare them."""
    total = delta.total_seconds()
    if total < 60:
        return f"{total:g}s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, total = divmod(total, size)
        if count:
            parts.append(f"{int(count)}{unit}")
    return " ".join(parts)


__all__ = [
    "OFFSETS_RETENTION", "RETENTION_CHECK_INTERVAL", "SEGMENT_ROLL", "TOPIC_RETENTION",
    "RedeliveryWindow", "human", "shipped_window", "shortfall",
]
