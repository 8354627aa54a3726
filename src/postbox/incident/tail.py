"""`postbox tail TOPIC`: decoded records from a start position, filtered, bounded or followed.

Start positions (``--from``): ``beginning``, ``end``, ``last:N`` (the last N records of each
partition; ``--limit`` then caps the total), an offset (``1200``, the same offset in every
partition, or ``offset:1200``), an ISO-8601 time, or a duration ago (``15m``, ``2h``, ``1d``).
End positions (``--until``, like kcat's ``-o e@ts``): an offset, an ISO-8601 time or a duration
ago; the record at that offset, and records at or after that time, are not shown. Without
``--follow`` the read stops at the end offsets seen when it started (or ``--until``), after
``--limit`` matches, or after ``--max-scan`` records.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from confluent_kafka import KafkaError, TopicPartition

from postbox.codec import AvroCodec
from postbox.kafka_cluster import Kafka
from postbox.durations import parse_duration
from postbox.incident.records import RecordView, ago, field_matches, iso_ms, parse_iso, payload_field, render


@dataclass(frozen=True)
class Start:
    kind: str  # beginning | end | last | offset | timestamp
    value: int = 0

    def describe(self) -> str:
        if self.kind == "timestamp":
            return f"time {iso_ms(self.value)}"
        if self.kind in ("last", "offset"):
            return f"last {self.value} per partition" if self.kind == "last" else f"offset {self.value}"
        return self.kind


def parse_start(text: str, now: datetime | None = None) -> Start:
    value = text.strip()
    low = value.lower()
    if low in ("beginning", "earliest", "start"):
        return Start("beginning")
    if low in ("end", "latest"):
        return Start("end")
    if m := re.fullmatch(r"last:(\d+)", low):
        return Start("last", int(m.group(1)))
    if m := re.fullmatch(r"(?:offset:)?(\d+)", low):
        return Start("offset", int(m.group(1)))
    when = parse_iso(value)
    if when is None:
        try:
            when = ago(parse_duration(low), now)
        except ValueError:
            raise ValueError(
                f"--from {text!r}: expected beginning, end, last:N, an offset, an ISO-8601 time or a duration ago (15m, 2h, 1d)"
            ) from None
    return Start("timestamp", _epoch_ms(when))


@dataclass(frozen=True)
class End:
    """Where a read stops (exclusive): the end seen at start, an offset, or a time."""

    kind: str  # end | offset | timestamp
    value: int = 0

    def describe(self) -> str:
        if self.kind == "offset":
            return f"offset {self.value}"
        if self.kind == "timestamp":
            return f"time {iso_ms(self.value)}"
        return "end"


def parse_end(text: str | None, now: datetime | None = None) -> End:
    """``--until``: an offset (``1500`` or ``offset:1500``), an ISO-8601 time, or a duration ago."""
    if text is None:
        return End("end")
    value = text.strip()
    if m := re.fullmatch(r"(?:offset:)?(\d+)", value.lower()):
        return End("offset", int(m.group(1)))
    when = parse_iso(value)
    if when is None:
        try:
            when = ago(parse_duration(value.lower()), now)
        except ValueError:
            raise ValueError(f"--until {text!r}: expected an offset, an ISO-8601 time or a duration ago (15m, 2h, 1d)") from None
    return End("timestamp", _epoch_ms(when))


def _epoch_ms(when: datetime) -> int:
    """Milliseconds since 1970, never negative (Kafka has no record before then)."""
    return max(0, int(when.timestamp() * 1000))


@dataclass
class Filters:
    key: str | None = None
    event_type: str | None = None
    event_id: str | None = None
    fields: list[tuple[str, str]] = field(default_factory=list)

    @property
    def active(self) -> bool:
        return bool(self.key or self.event_type or self.event_id or self.fields)

    def matches(self, view: RecordView) -> bool:
        if self.key is not None and view.key != self.key:
            return False
        if self.event_type is not None and view.meta.event_type != self.event_type:
            return False
        if self.event_id is not None and view.meta.event_id != self.event_id:
            return False
        for path, wanted in self.fields:
            found, value = payload_field(view.payload, path)
            if not found or not field_matches(value, wanted):
                return False
        return True


def parse_where(items: list[str]) -> list[tuple[str, str]]:
    out = []
    for item in items:
        path, sep, wanted = item.partition("=")
        if not sep or not path.strip():
            raise ValueError(f"--where {item!r}: expected FIELD=VALUE (a dotted path into the payload, e.g. customer_id=c-42)")
        out.append((path.strip(), wanted))
    return out


@dataclass
class TailResult:
    records: list[RecordView]
    scanned: int
    complete: bool
    starts: dict[int, int]
    ends: dict[int, int]


def _end_offsets(kafka: Kafka, topic: str, partitions: list[int], marks: dict[int, tuple[int, int]], end: End | None) -> dict[int, int]:
    """Per partition, the offset to stop before: the high watermark unless ``end`` says otherwise."""
    if end is not None and end.kind == "offset":
        return {p: min(high, max(low, end.value)) for p, (low, high) in marks.items()}
    if end is not None and end.kind == "timestamp":
        return kafka.offsets_for_time(topic, partitions, end.value)
    return {p: high for p, (_, high) in marks.items()}


def start_offsets(kafka: Kafka, topic: str, partitions: list[int], start: Start, end: End | None = None) -> tuple[dict[int, int], dict[int, int]]:
    """Per partition, the first offset to read and the offset to stop before."""
    marks = kafka.watermarks(topic, partitions)
    ends = _end_offsets(kafka, topic, partitions, marks, end)
    if start.kind == "beginning":
        starts = {p: low for p, (low, _) in marks.items()}
    elif start.kind == "end":
        starts = dict(ends)
    elif start.kind == "last":
        starts = {p: max(low, ends[p] - start.value) for p, (low, _) in marks.items()}
    elif start.kind == "offset":
        starts = {p: min(max(start.value, low), high) for p, (low, high) in marks.items()}
    else:
        starts = kafka.offsets_for_time(topic, partitions, start.value)
    return {p: min(starts[p], ends[p]) for p in partitions}, ends


def read(
    kafka: Kafka, topic: str, partitions: list[int], start: Start, filters: Filters, *,
    limit: int, max_scan: int, progress: Callable[[int, int], None] | None = None, end: End | None = None,
) -> TailResult:
    """A bounded read (no --follow): matches in (timestamp, partition, offset) order."""
    starts, ends = start_offsets(kafka, topic, partitions, start, end)
    codec = AvroCodec()
    matched: list[RecordView] = []
    scanned = 0
    total = sum(max(0, ends[p] - starts[p]) for p in partitions)
    keep_last = start.kind == "last"
    stop = [False]
    for msg in kafka.scan(
        {(topic, p): starts[p] for p in partitions}, {(topic, p): ends[p] for p in partitions},
        max_records=max_scan, progress=progress, stop=lambda: stop[0],
    ):
        scanned += 1
        view = render(msg, codec)
        if filters.matches(view):
            matched.append(view)
            if not keep_last and len(matched) >= limit:
                stop[0] = True
    matched.sort(key=lambda v: (v.timestamp_ms or 0, v.partition, v.offset))
    if keep_last:
        matched = matched[-limit:]
    else:
        matched = matched[:limit]
    complete = scanned >= total
    return TailResult(matched, scanned, complete, starts, ends)


def follow(
    kafka: Kafka, topic: str, partitions: list[int], start: Start, filters: Filters, *,
    limit: int | None, idle_timeout: float | None = None, end: End | None = None,
) -> Iterator[RecordView]:
    """Records as they arrive (until ``limit`` matches, every partition past ``end``, ``idle_timeout``
    seconds without any, or Ctrl-C)."""
    starts, _ = start_offsets(kafka, topic, partitions, start)
    codec = AvroCodec()
    consumer = kafka.new_reader()
    shown = 0
    last = time.monotonic()
    open_parts = _open_partitions(partitions, starts, end)
    try:
        consumer.assign([TopicPartition(topic, p, starts[p]) for p in sorted(open_parts)])
        while open_parts and (limit is None or shown < limit):
            # consume() returns once it has num_messages or after the timeout: with --limit and no
            # filter, no more than the records still to show, so the last ones are not held back
            # 0.5 s (with a filter, matches are not records read: full batches)
            wanted = _batch_size(limit, shown, filters)
            batch = consumer.consume(num_messages=wanted, timeout=0.5)
            if not batch and _idle_past(last, idle_timeout):
                return
            for msg in batch:
                if msg.error():
                    _raise_if_unavailable(kafka, msg)
                    continue
                last = time.monotonic()
                if not _admit(msg, open_parts, end):
                    continue
                view = render(msg, codec)
                if filters.matches(view):
                    shown += 1
                    yield view
                    if limit is not None and shown >= limit:
                        return
    finally:
        consumer.close()


def _open_partitions(partitions: list[int], starts: dict[int, int], end: End | None) -> set[int]:
    """The partitions with something to show: all, less those that start at or past an ``--until`` offset."""
    return {p for p in partitions if not (end is not None and end.kind == "offset" and starts[p] >= end.value)}


def _batch_size(limit: int | None, shown: int, filters: Filters) -> int:
    """How many records one consume() asks for."""
    return 500 if limit is None or filters.active else max(1, min(500, limit - shown))


def _idle_past(last: float, idle_timeout: float | None) -> bool:
    """True once ``--idle-timeout`` seconds have passed since the last record (``last``, monotonic)."""
    return idle_timeout is not None and time.monotonic() - last > idle_timeout


def _raise_if_unavailable(kafka: Kafka, msg: Any) -> None:
    """An error record that means the brokers are gone stops the follow; any other is skipped."""
    if msg.error().code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
        raise kafka.unavailable(msg.error().str())


def _admit(msg: Any, open_parts: set[int], end: End | None) -> bool:
    """Whether a record is shown (when it matches): not when its partition is closed or it is past
    ``--until``; the partition closes at the first record past ``--until`` or at its last before it."""
    if msg.partition() not in open_parts:
        return False
    if _past(msg, end):
        open_parts.discard(msg.partition())
        return False
    if end is not None and end.kind == "offset" and msg.offset() >= end.value - 1:
        open_parts.discard(msg.partition())  # its last record before --until
    return True


def _past(msg: Any, end: End | None) -> bool:
    """True when ``msg`` is at or after the ``--until`` position (it and its partition's later ones are not shown)."""
    if end is None or end.kind == "end":
        return False
    if end.kind == "offset":
        return bool(msg.offset() >= end.value)
    ts_type, ts = msg.timestamp()
    return bool(ts_type and ts >= end.value)
