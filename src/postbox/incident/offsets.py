"""`postbox replay --group G --to …`: move a stopped group's committed offsets back (re-consume).

Rewinding is safe because the group deduplicates by event id — for events whose markers still
exist. The plan therefore looks at the oldest record that would be re-consumed: if it was written
longer ago than ``marker TTL − margin``, the group may apply it twice, and the reset is refused
without ``--force``. Moving *forward* skips events (never safe) and also needs ``--force``.
A group with members is always refused: its consumers would overwrite the new offsets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition

from postbox.errors import GroupActiveError, IncidentError, UnknownGroupError
from postbox.kafka_cluster import Kafka
from postbox.incident.records import iso_ms, parse_iso
from postbox.durations import parse_duration
from postbox.incident.redis_state import human_duration


@dataclass(frozen=True)
class Target:
    kind: str  # earliest | latest | offset | timestamp
    offset: int | None = None
    timestamp_ms: int | None = None

    def describe(self) -> str:
        if self.kind == "offset":
            return f"offset {self.offset}"
        if self.kind == "timestamp":
            return f"time {iso_ms(self.timestamp_ms)}"
        return self.kind


def parse_target(text: str, now: datetime | None = None) -> Target:
    """``earliest``, ``latest``, an offset (``1200``), an ISO time, or a duration ago (``2h``)."""
    value = text.strip().lower()
    if value in ("earliest", "beginning"):
        return Target("earliest")
    if value in ("latest", "end"):
        return Target("latest")
    if re.fullmatch(r"\d+", value):
        return Target("offset", offset=int(value))
    when = parse_iso(text)
    if when is None:
        try:
            when = (now or datetime.now(timezone.utc)) - parse_duration(value)
        except ValueError:
            raise ValueError(
                f"--to {text!r}: expected earliest, latest, an offset, an ISO-8601 time or a duration ago (e.g. 2h)"
            ) from None
    return Target("timestamp", timestamp_ms=int(when.timestamp() * 1000))


@dataclass
class Move:
    topic: str
    partition: int
    current: int | None
    new: int
    earliest: int
    end: int
    oldest_ms: int | None = None

    @property
    def delta(self) -> int:
        """Records the group will read again (positive) or skip (negative)."""
        base = self.current if self.current is not None else self.earliest
        return base - self.new

    def as_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic, "partition": self.partition, "current": self.current, "new": self.new,
            "earliest": self.earliest, "end": self.end, "reconsumed": max(0, self.delta),
            "skipped": max(0, -self.delta), "oldest_reconsumed_at": iso_ms(self.oldest_ms),
        }


@dataclass
class ResetPlan:
    group: str
    target: Target
    moves: list[Move]
    problems: list[str]
    state: str
    refused: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "group": self.group, "to": self.target.describe(), "group_state": self.state,
            "partitions": [m.as_dict() for m in self.moves],
            "reconsumed": sum(max(0, m.delta) for m in self.moves),
            "skipped": sum(max(0, -m.delta) for m in self.moves),
            "problems": self.problems, "refused": self.refused,
        }


def plan_reset(
    kafka: Kafka, group: str, target: Target, *, topics: list[str] | None, partition: int | None,
    marker_ttl: timedelta, margin: timedelta, force: bool,
) -> ResetPlan:
    info = kafka.describe_group(group)
    if info.members:
        hosts = ", ".join(sorted({m.host for m in info.members}))
        raise GroupActiveError(
            f"group {group} has {len(info.members)} member(s) ({hosts}); its consumers would overwrite the reset",
            fix=f"stop every consumer of {group}, wait until `postbox lag {group}` shows 0 members, then retry",
        )
    committed = kafka.committed(group)
    names = topics or sorted({t for t, _ in committed})
    if not names:
        raise UnknownGroupError(
            f"group {group} has no committed offsets", fix="name the topics to set with --topic",
        )
    moves: list[Move] = []
    for topic in names:
        parts = kafka.partitions(topic)
        if partition is not None:
            if partition not in parts:
                raise IncidentError(f"topic {topic} has no partition {partition} (it has {len(parts)})")
            parts = [partition]
        marks = kafka.watermarks(topic, parts)
        by_time = kafka.offsets_for_time(topic, parts, target.timestamp_ms) if target.kind == "timestamp" else {}
        for p in parts:
            low, high = marks[p]
            new = {
                "earliest": low, "latest": high,
                "offset": min(max(target.offset or 0, low), high),
                "timestamp": by_time.get(p, high),
            }[target.kind]
            moves.append(Move(topic, p, committed.get((topic, p)), new, low, high))
    # the oldest record each partition would re-read: is it inside the dedupe window?
    firsts = kafka.read_first({(m.topic, m.partition): m.new for m in moves if m.delta > 0})
    problems = []
    now_ms = int(datetime.now(timezone.utc).timestamp() * 1000)
    for m in moves:
        msg = firsts.get((m.topic, m.partition))
        if msg is not None and msg.timestamp()[0]:
            m.oldest_ms = msg.timestamp()[1]
    oldest = min((m.oldest_ms for m in moves if m.oldest_ms), default=None)
    if oldest is not None and timedelta(milliseconds=now_ms - oldest) >= marker_ttl - margin:
        problems.append(
            f"the oldest re-consumed record is {human_duration(timedelta(milliseconds=now_ms - oldest))} old; dedupe markers live "
            f"{human_duration(marker_ttl)} (margin {human_duration(margin)}): events applied before may be applied again"
        )
    skipped = sum(max(0, -m.delta) for m in moves)
    if skipped:
        problems.append(f"moving forward skips {skipped:,} record(s) the group has not consumed: they will never be applied")
    return ResetPlan(group, target, moves, problems, info.state, refused=bool(problems) and not force)


def apply_reset(kafka: Kafka, plan: ResetPlan) -> None:
    info = kafka.describe_group(plan.group)  # check again right before writing
    if info.members:
        raise GroupActiveError(f"group {plan.group} gained members while planning; nothing was changed",
                               fix="stop its consumers and retry")
    request = ConsumerGroupTopicPartitions(
        plan.group, [TopicPartition(m.topic, m.partition, m.new) for m in plan.moves]
    )
    try:
        futures = kafka.admin.alter_consumer_group_offsets([request], request_timeout=kafka.timeout)
        result = futures[plan.group].result(timeout=kafka.timeout + 2)
    except KafkaException as exc:
        raise IncidentError(f"the broker refused the offset reset of {plan.group}: {exc}",
                            fix="check that the group has no members (`postbox lag`) and retry") from None
    bad = [tp for tp in (result.topic_partitions or []) if tp.error is not None]
    if bad:
        raise IncidentError(f"offset reset of {plan.group} failed for {', '.join(f'{tp.topic}[{tp.partition}]: {tp.error}' for tp in bad)}")


def reset_audit(plan: ResetPlan, force: bool) -> Any:
    """The audit record of an applied reset: the plan, and how many records will be read again."""
    from postbox.incident.audit import AuditRecord

    return AuditRecord(command="replay", target=plan.group, count=sum(max(0, m.delta) for m in plan.moves), outcome="ok",
                       details={"to": plan.target.describe(), "force": force, "plan": plan.as_dict()})
