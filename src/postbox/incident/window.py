"""Resolve a time window (``--from SPEC --until SPEC``) into per-partition offsets, once.

Both ends use the grammar of ``postbox tail`` (:func:`postbox.incident.tail.parse_start` and
:func:`~postbox.incident.tail.parse_end`): an offset (the same offset in every partition), an
ISO-8601 time, or a duration ago; the start also takes ``beginning``, ``end``, ``last:N`` and
``committed`` (the group's committed offset of each partition), the end also ``end`` (the high
watermark when the window is resolved). A time resolves to the first offset at or after it
(ListOffsets, as kcat's ``-o s@ts`` / ``-o e@ts``). The end is resolved once, at start-up: records
written later are not in the window, so the run ends.

Every adjustment is said, not silently made: an end beyond the high watermark is clamped to it, a
start before the earliest retained record moves to it, a time after the last record means the
high watermark. An end before the start is an error naming the partition (never an empty run that
looks like success), except from ``committed``: a partition the group already consumed past the end
has nothing left to apply, and its window is empty, said in its note.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from postbox.consumer.window import Span
from postbox.errors import IncidentError
from postbox.incident.records import iso_ms
from postbox.incident.redis_state import human_duration
from postbox.incident.tail import End, Start, parse_end, parse_start
from postbox.incident.window_order import Ahead, ahead_of_group
from postbox.kafka_cluster import Kafka

#: ``--from committed``: start each partition at the group's committed offset.
COMMITTED = "committed"
#: ``--until end``: the high watermark at start-up.
END_WORDS = ("end", "latest")


def parse_window_start(text: str, now: datetime | None = None) -> Start:
    """``--from``: tail's start grammar, plus ``committed``."""
    if text.strip().lower() == COMMITTED:
        return Start(COMMITTED)
    return parse_start(text, now)


def parse_window_end(text: str, now: datetime | None = None) -> End:
    """``--until``: tail's end grammar, plus ``end``/``latest`` (the high watermark at start-up)."""
    if text.strip().lower() in END_WORDS:
        return End("end")
    return parse_end(text, now)


def check_order(start: Start, end: End) -> None:
    """ValueError when both ends are of one kind and the end comes first (names both flags)."""
    same_kind = (start.kind, end.kind) in (("offset", "offset"), ("timestamp", "timestamp"))
    if same_kind and end.value < start.value:
        raise ValueError(f"--until ({end.describe()}) is before --from ({start.describe()}): the window would be empty; did you swap them?")


@dataclass(frozen=True)
class WindowRow:
    """One partition's window, with its watermarks and what was adjusted (``notes``)."""

    span: Span
    low: int
    high: int
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        s = self.span
        return {"topic": s.topic, "partition": s.partition, "start": s.start, "end": s.end, "records": s.records,
                "earliest": self.low, "high_watermark": self.high, "notes": list(self.notes)}


@dataclass
class WindowPlan:
    """A resolved window over some topics' partitions."""

    start: Start
    end: End
    rows: list[WindowRow]
    problems: list[str] = field(default_factory=list)
    oldest_ms: int | None = None
    #: Members of the group when :func:`check_group_position` found the window ahead of it.
    members: int = 0

    @property
    def spans(self) -> list[Span]:
        return [r.span for r in self.rows]

    @property
    def records(self) -> int:
        return sum(r.span.records for r in self.rows)

    def describe(self) -> str:
        return f"from {self.start.describe()} until {self.end.describe()}"

    def as_dict(self) -> dict[str, Any]:
        return {"from": self.start.describe(), "until": self.end.describe(), "records": self.records,
                "oldest_record_at": iso_ms(self.oldest_ms), "problems": self.problems,
                "partitions": [r.as_dict() for r in self.rows]}


def plan_window(
    kafka: Kafka, topics: list[str], start: Start, end: End, *,
    partitions: list[int] | None = None, committed: dict[tuple[str, int], int] | None = None,
) -> WindowPlan:
    """Resolve ``start``/``end`` on every partition of ``topics`` (or only ``partitions``)."""
    check_order(start, end)
    rows: list[WindowRow] = []
    for topic in topics:
        available = kafka.partitions(topic)
        parts = available if partitions is None else [p for p in partitions if p in available]
        missing = sorted(set(partitions or []) - set(available))
        if missing:
            raise IncidentError(f"topic {topic} has no partition {missing[0]} (it has {len(available)})",
                                fix="pick partitions the topic has (`postbox topics` lists them)")  # fmt: skip
        rows.extend(_topic_rows(kafka, topic, parts, start, end, committed or {}))
    return WindowPlan(start, end, rows)


def _topic_rows(kafka: Kafka, topic: str, parts: list[int], start: Start, end: End,
                committed: dict[tuple[str, int], int]) -> list[WindowRow]:  # fmt: skip
    marks = kafka.watermarks(topic, parts)
    by_end = kafka.offsets_for_time(topic, parts, end.value) if end.kind == "timestamp" else {}
    by_start = kafka.offsets_for_time(topic, parts, start.value) if start.kind == "timestamp" else {}
    rows = []
    for p in parts:
        low, high = marks[p]
        stop, end_notes = _end_offset(end, low, high, by_end.get(p))
        first, start_notes = _start_offset(start, low, high, stop, by_start.get(p), committed.get((topic, p)))
        if stop < first and start.kind == COMMITTED:  # the group is past the end here: nothing left to apply
            stop, end_notes = first, [f"the group's committed offset {first} is already past the window's end {stop}: nothing to apply"]
        if stop < first:
            raise IncidentError(
                f"{topic}[{p}]: the window's end resolves to offset {stop}, before its start at offset {first}",
                fix="pass an end (--until) after the start (an offset, an ISO time or a duration ago)")  # fmt: skip
        notes = ["empty partition"] if low == high else start_notes + end_notes
        rows.append(WindowRow(Span(topic, p, first, stop), low, high, tuple(notes)))
    return rows


def _end_offset(end: End, low: int, high: int, by_time: int | None) -> tuple[int, list[str]]:
    """The offset the window stops before, and what was adjusted to get it."""
    if end.kind == "offset":
        if end.value > high:
            return high, [f"end offset {end.value} is beyond the high watermark: clamped to {high}"]
        if end.value < low:
            return low, [f"end offset {end.value} is before the earliest retained offset {low}"]
        return end.value, []
    if end.kind == "timestamp":
        found = high if by_time is None else by_time
        if found >= high:
            return high, [f"no record at or after the end time {iso_ms(end.value)}: the window ends at the high watermark {high}"]
        return found, []
    return high, []


def _start_offset(start: Start, low: int, high: int, stop: int, by_time: int | None,
                  committed: int | None) -> tuple[int, list[str]]:  # fmt: skip
    """The window's first offset, and what was adjusted to get it."""
    if start.kind == "beginning":
        return low, []
    if start.kind == "end":
        return high, []
    if start.kind == "last":
        return max(low, stop - start.value), []
    if start.kind == "offset":
        if start.value < low:
            return low, [f"start offset {start.value} is no longer retained: the window starts at the earliest offset {low}"]
        return min(start.value, high), [] if start.value <= high else [f"start offset {start.value} is beyond the high watermark {high}"]
    if start.kind == COMMITTED:
        if committed is None:
            return low, ["the group has no committed offset here: the window starts at the earliest offset"]
        return max(low, committed), []
    found = high if by_time is None else by_time
    if found == low:
        return low, [f"the start time {iso_ms(start.value)} is at or before the earliest retained record (offset {low})"]
    return found, []


def check_group_position(kafka: Kafka, plan: WindowPlan, group: str, *, offset_reset: str = "earliest") -> list[Ahead]:
    """The partitions where ``plan`` starts ahead of the live ``group`` (:mod:`postbox.incident.window_order`),
    read from the group's committed offsets and added to ``plan.problems``; ``plan.members`` is
    then how many members the group has (the refusal's fix depends on it)."""
    found = ahead_of_group(plan.rows, kafka.committed(group), offset_reset=offset_reset)
    plan.problems.extend(a.describe() for a in found)
    if found:
        plan.members = len(kafka.describe_group(group).members)
    return found


def check_marker_window(kafka: Kafka, plan: WindowPlan, marker_ttl: timedelta, margin: timedelta) -> None:
    """Add a problem to ``plan`` when its oldest record is older than the dedupe markers live
    (``marker_ttl`` − ``margin``): events applied before may be applied again."""
    firsts = kafka.read_first({r.span.key: r.span.start for r in plan.rows if r.span.records > 0})
    stamps = [m.timestamp()[1] for m in firsts.values() if m is not None and m.timestamp()[0]]
    plan.oldest_ms = min(stamps, default=None)
    if plan.oldest_ms is None:
        return
    age = timedelta(milliseconds=int(datetime.now(timezone.utc).timestamp() * 1000) - plan.oldest_ms)
    if age >= marker_ttl - margin:
        plan.problems.append(
            f"the window's oldest record is {human_duration(age)} old; dedupe markers live {human_duration(marker_ttl)} "
            f"(margin {human_duration(margin)}): events applied before may be applied again"
        )


__all__ = ["COMMITTED", "WindowPlan", "WindowRow", "check_group_position", "check_marker_window", "check_order",
           "parse_window_end", "parse_window_start", "plan_window"]  # fmt: skip
