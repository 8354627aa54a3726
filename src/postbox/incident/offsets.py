"""`postbox replay --group G --to …`: move a stopped group's committed offsets back (re-consume).

Rewinding is safe because the group deduplicates by event id — for events whose markers still
exist. A marker lives ``marker TTL`` from when the group applied the event, which is no earlier than
the event's creation; so the plan reads every record that would be re-consumed and looks at the
oldest *event* among them (its ``created_at`` header, else its UUIDv7 id's time, else the record's
Kafka timestamp, whichever is earliest): a copy appended later (`dlq replay`, `db republish`, a
Debezium re-send) has a fresh Kafka timestamp but carries an old event. If that event was created
longer ago than ``marker TTL − margin``, the group may apply it twice, and the reset is refused
without ``--force``; so is a re-read too long to check (more than ``AGE_SCAN_LIMIT`` records). Moving *forward* skips events (never safe) and also needs ``--force``.
A group with members is always refused: its consumers would overwrite the new offsets.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition

from postbox.errors import GroupActiveError, IncidentError, UnknownGroupError
from postbox.kafka_cluster import Kafka, group_admin_error
from postbox.durations import parse_duration
from postbox.codec.headers import EventHeaders
from postbox.incident.records import ago, iso_ms, parse_iso, uuid7_time
from postbox.incident.redis_state import human_duration


@dataclass(frozen=True)
class Target:
    """Where a reset moves each partition (``kafka-consumer-groups --to-*`` / ``--shift-by`` / ``--from-file``)."""

    kind: str  # earliest | latest | offset | timestamp | shift | current | file
    offset: int | None = None
    timestamp_ms: int | None = None
    #: ``file``: the new offset of each (topic, partition) listed in the plan file.
    offsets: tuple[tuple[str, int, int], ...] = ()
    source: str = ""

    def describe(self) -> str:
        if self.kind == "offset":
            return f"offset {self.offset}"
        if self.kind == "timestamp":
            return f"time {iso_ms(self.timestamp_ms)}"
        if self.kind == "shift":
            return f"shift by {self.offset:+d}"
        if self.kind == "file":
            return f"the plan in {self.source}"
        return self.kind

    def topics(self) -> list[str]:
        """The topics a plan file names (none for the other kinds)."""
        return sorted({t for t, _, _ in self.offsets})


def shift_target(by: int) -> Target:
    """Move every partition ``by`` records from its committed offset (negative: re-consume)."""
    return Target("shift", offset=by)


def read_plan_file(path: Path) -> Target:
    """A plan exported with ``--export`` (CSV ``topic,partition,offset`` per line, as
    kafka-consumer-groups writes it), as a target; errors name the line."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise IncidentError(f"cannot read the plan file {path}: {exc.strerror}", fix="pass a file written by `postbox replay --export`") from None
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 3 or not fields[0] or not fields[1].isdigit() or not fields[2].lstrip("-").isdigit() or int(fields[2]) < 0:
            raise IncidentError(f"{path}:{number}: expected TOPIC,PARTITION,OFFSET with a non-negative offset, got {line!r}",
                                fix="a plan file is what `postbox replay --export FILE` writes")
        rows.append((fields[0], int(fields[1]), int(fields[2])))
    if not rows:
        raise IncidentError(f"{path}: the plan file lists no partition", fix="export a plan with `postbox replay --group G --to ... --export FILE`")
    return Target("file", offsets=tuple(rows), source=str(path))


def write_plan_file(plan: "ResetPlan", path: Path) -> None:
    """The plan's new offsets as CSV ``topic,partition,offset`` (kafka-consumer-groups' format)."""
    path.write_text("".join(f"{m.topic},{m.partition},{m.new}\n" for m in plan.moves))


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
            when = ago(parse_duration(value), now)
        except ValueError:
            raise ValueError(
                f"--to {text!r}: expected earliest, latest, an offset, an ISO-8601 time or a duration ago (e.g. 2h)"
            ) from None
    return Target("timestamp", timestamp_ms=max(0, int(when.timestamp() * 1000)))


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
    names = topics or target.topics() or sorted({t for t, _ in committed})
    if not names:
        raise UnknownGroupError(
            f"group {group} has no committed offsets", fix="name the topics to set with --topic",
        )
    moves = [m for topic in names for m in _moves(kafka, topic, target, partition, committed)]
    problems = _age_problems(kafka, moves, marker_ttl, margin)
    skipped = sum(max(0, -m.delta) for m in moves)
    if skipped:
        problems.append(f"moving forward skips {skipped:,} record(s) the group has not consumed: they will never be applied")
    return ResetPlan(group, target, moves, problems, info.state, refused=bool(problems) and not force)


#: The most records a plan reads to find the oldest event it would re-consume.
AGE_SCAN_LIMIT = 500_000


def event_created_ms(msg: Any) -> int | None:
    """When the event a record carries was created, in ms: the earliest of its ``created_at``
    header, its UUIDv7 id's time and the record's Kafka timestamp (None when none is known)."""
    meta = EventHeaders.parse(msg.headers())
    known = [when.timestamp() * 1000 for when in (parse_iso(meta.created_at), uuid7_time(meta.event_id)) if when is not None]
    kind, timestamp_ms = msg.timestamp()
    if kind and timestamp_ms >= 0:
        known.append(timestamp_ms)
    return int(min(known)) if known else None


def _mark_oldest(records: Iterable[Any], rereads: dict[tuple[str, int], Move]) -> None:
    """Sets each re-read move's ``oldest_ms`` to the oldest creation time among its records."""
    for msg in records:
        created = event_created_ms(msg)
        move = rereads.get((msg.topic(), msg.partition()))
        if created is not None and move is not None:
            move.oldest_ms = created if move.oldest_ms is None else min(move.oldest_ms, created)


def _age_problems(kafka: Kafka, moves: list[Move], marker_ttl: timedelta, margin: timedelta) -> list[str]:
    """Read every record the plan re-consumes; set each move's ``oldest_ms`` (its oldest event's
    creation) and say whether any is outside the dedupe window or the re-read too long to check."""
    rereads = {(m.topic, m.partition): m for m in moves if m.delta > 0}
    total = sum(m.delta for m in rereads.values())
    starts = {tp: m.new for tp, m in rereads.items()}
    ends = {tp: m.new + m.delta for tp, m in rereads.items()}
    _mark_oldest(kafka.scan(starts, ends, max_records=AGE_SCAN_LIMIT), rereads)
    problems = []
    now_ms = int(datetime.now(timezone.utc).timestamp() * 1000)
    oldest = min((m.oldest_ms for m in moves if m.oldest_ms), default=None)
    if oldest is not None and timedelta(milliseconds=now_ms - oldest) >= marker_ttl - margin:
        problems.append(
            f"the oldest re-consumed event was created {human_duration(timedelta(milliseconds=now_ms - oldest))} ago; dedupe markers "
            f"live {human_duration(marker_ttl)} (margin {human_duration(margin)}): events applied before may be applied again"
        )
    if total > AGE_SCAN_LIMIT:
        problems.append(
            f"the reset re-reads {total:,} records, more than the {AGE_SCAN_LIMIT:,} the plan checks for events older than the "
            "dedupe window: reset in smaller steps (--shift-by, --partition) or check by hand"
        )
    return problems


def _reset_partitions(parts: list[int], topic: str, target: Target, partition: int | None) -> list[int]:
    """The topic's partitions a reset moves: those the offsets file lists, or the one ``--partition`` names."""
    if target.kind == "file":
        listed = {p: o for t, p, o in target.offsets if t == topic}
        unknown = sorted(set(listed) - set(parts))
        if unknown:
            raise IncidentError(f"{target.source}: topic {topic} has no partition {unknown[0]} (it has {len(parts)})")
        parts = sorted(listed)
    if partition is not None:
        if partition not in parts:
            raise IncidentError(f"topic {topic} has no partition {partition} (it has {len(parts)})")
        parts = [partition]
    return parts


def _moves(kafka: Kafka, topic: str, target: Target, partition: int | None, committed: dict[tuple[str, int], int]) -> list[Move]:
    """One topic's moves: each partition's new offset for ``target``, inside [earliest, end]."""
    parts = _reset_partitions(kafka.partitions(topic), topic, target, partition)
    marks = kafka.watermarks(topic, parts)
    by_time = kafka.offsets_for_time(topic, parts, target.timestamp_ms or 0) if target.kind == "timestamp" else {}
    moves = []
    for p in parts:
        low, high = marks[p]
        current = committed.get((topic, p))
        wanted = {
            "earliest": low, "latest": high, "offset": target.offset or 0,
            "timestamp": by_time.get(p, high),
            "shift": (current if current is not None else low) + (target.offset or 0),
            "current": current if current is not None else low,
            "file": next((o for t, q, o in target.offsets if t == topic and q == p), low),
        }[target.kind]
        moves.append(Move(topic, p, current, min(max(wanted, low), high), low, high))
    return moves


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
        refused = group_admin_error(plan.group, kafka.bootstrap, exc.args[0] if exc.args else None,
                                    action="reset the offsets of", operation="Read")  # committing offsets needs Read
        raise refused or IncidentError(f"the broker refused the offset reset of {plan.group}: {exc}",
                                       fix="check that the group has no members (`postbox lag`) and retry") from None
    bad = [tp for tp in (result.topic_partitions or []) if tp.error is not None]
    if bad:
        raise IncidentError(f"offset reset of {plan.group} failed for {', '.join(f'{tp.topic}[{tp.partition}]: {tp.error}' for tp in bad)}")


def reset_audit(plan: ResetPlan, force: bool) -> Any:
    """The audit record of an applied reset: the plan, and how many records will be read again."""
    from postbox.incident.audit import AuditRecord

    return AuditRecord(command="replay", target=plan.group, count=sum(max(0, m.delta) for m in plan.moves), outcome="ok",
                       details={"to": plan.target.describe(), "force": force, "plan": plan.as_dict()})
