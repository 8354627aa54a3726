"""Dead letters: reading ``<topic>.dlq`` topics and replaying selected records to their origin.

The consumer runtime's contract: a dead letter keeps the original key, value and headers (``id``,
``event_type``, ``aggregate_type``, ``created_at``, ``traceparent``) and adds ``postbox.error``,
``postbox.error.class``, ``postbox.error.kind``, ``postbox.origin.topic``/``partition``/``offset``,
``postbox.attempts``, ``postbox.group`` and ``postbox.failed_at``.

Replaying sends the original key, value and headers (without the ``postbox.*`` error headers, with
``postbox.replay.of`` naming the dead letter) back to the origin topic and partition. Consumers
deduplicate by event id, so groups that already applied the event skip it — as long as their
marker still exists. Markers expire after the marker TTL (8 days by default), counted from when
the group applied the event, which is no earlier than the event's creation. So an event created
less than ``TTL − margin`` ago is safe to replay; an older one may be applied twice by a group
whose marker is gone, and replay refuses it without ``--force``.

A *reference-only* dead letter (``postbox.reference-only: true``: the record was too large for its
dead-letter topic) carries no value; replay reads the original record back from its origin
topic/partition/offset and sends that, or refuses it (status ``no-origin``) when the origin no
longer holds it (retention) or holds another event there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from postbox.codec import AvroCodec
from postbox.consumer import dlq_record
from postbox.errors import IncidentError, PostboxError, UnknownTopicError
from postbox.kafka_cluster import DLQ_SUFFIX, Kafka
from postbox.topics import TOPIC_PREFIX
from postbox.consumer.dlq_record import REPLAY_OF_HEADER
from postbox.incident.records import (
    RecordView,
    parse_iso,
    render,
    uuid7_time,
)
from postbox.incident.redis_state import RedisState, human_duration, iso
from postbox.incident.replay_order import hold_out_of_order

DEFAULT_MAX_SCAN = 200_000
DEFAULT_SAFETY_MARGIN = timedelta(hours=1)


@dataclass
class DeadLetter:
    record: RecordView

    @property
    def ref(self) -> str:
        return f"{self.record.topic}:{self.record.partition}:{self.record.offset}"

    def _h(self, name: str) -> str | None:
        return self.record.header(name)

    @property
    def event_id(self) -> str | None:
        return self.record.meta.event_id

    @property
    def error(self) -> str | None:
        return self._h(dlq_record.H_ERROR)

    @property
    def error_class(self) -> str | None:
        return self._h(dlq_record.H_CLASS)

    @property
    def group(self) -> str | None:
        return self._h(dlq_record.H_GROUP)

    @property
    def origin_topic(self) -> str:
        topic = self._h(dlq_record.H_TOPIC)
        if topic:
            return topic
        name = self.record.topic
        return name[: -len(DLQ_SUFFIX)] if name.endswith(DLQ_SUFFIX) else name

    @property
    def origin_partition(self) -> int | None:
        return _int(self._h(dlq_record.H_PARTITION))

    @property
    def origin_offset(self) -> int | None:
        return _int(self._h(dlq_record.H_OFFSET))

    @property
    def reference_only(self) -> bool:
        """True when the dead letter holds metadata only; the original is at its origin offset."""
        return (self._h(dlq_record.H_REFERENCE_ONLY) or "").lower() == "true"

    @property
    def original_bytes(self) -> int | None:
        return _int(self._h(dlq_record.H_ORIGINAL_BYTES))

    @property
    def attempts(self) -> int | None:
        return _int(self._h(dlq_record.H_ATTEMPTS))

    @property
    def failed_at(self) -> datetime | None:
        return parse_iso(self._h(dlq_record.H_FAILED_AT))

    @property
    def created_at(self) -> datetime | None:
        """The event's creation: its header, else the UUIDv7 time, else when it failed / was written."""
        return (
            parse_iso(self.record.meta.created_at)
            or uuid7_time(self.event_id)
            or self.failed_at
            or (datetime.fromtimestamp(self.record.timestamp_ms / 1000, tz=timezone.utc) if self.record.timestamp_ms else None)
        )

    def replay_headers(self) -> list[tuple[str, bytes | None]]:
        kept = [(k, v) for k, v in self.record.raw_headers if not k.startswith(dlq_record.DLQ_HEADER_PREFIX)]
        return kept + [(REPLAY_OF_HEADER, self.ref.encode())]

    def as_dict(self, full: bool = False) -> dict[str, Any]:
        data = {
            "ref": self.ref,
            "dlq_topic": self.record.topic,
            "dlq_partition": self.record.partition,
            "dlq_offset": self.record.offset,
            "dead_lettered_at": self.record.timestamp,
            "event_id": self.event_id,
            "event_type": self.record.meta.event_type,
            "aggregate_type": self.record.meta.aggregate_type,
            "key": self.record.key,
            "created_at": iso(self.created_at),
            "group": self.group,
            "error": self.error,
            "error_class": self.error_class,
            "error_kind": self._h(dlq_record.H_KIND),
            "origin": {"topic": self.origin_topic, "partition": self.origin_partition, "offset": self.origin_offset},
            "reference_only": self.reference_only,
            "original_bytes": self.original_bytes,
            "attempts": self.attempts,
            "failed_at": iso(self.failed_at),
        }
        if full:
            data["record"] = self.record.as_dict()
        return data


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def dlq_topics(kafka: Kafka, topic: str | None = None) -> list[str]:
    """The DLQ topics to read: ``topic`` (an origin topic or its .dlq) or every ``*.dlq``."""
    if topic:
        name = topic if topic.endswith(DLQ_SUFFIX) else topic + DLQ_SUFFIX
        if not kafka.topic_exists(name):
            if topic.endswith(DLQ_SUFFIX) or not kafka.topic_exists(topic):
                kafka.require_topic(name)  # raises UnknownTopicError with suggestions
            raise UnknownTopicError(
                f"topic {topic} has no dead-letter topic {name}: nothing was dead-lettered from it",
                fix="`postbox dlq list` shows every dead-letter topic",
            )
        return [name]
    return [t for t in kafka.topic_names() if t.endswith(DLQ_SUFFIX)]


@dataclass
class Selection:
    event_ids: list[str] = field(default_factory=list)
    error_class: str | None = None
    group: str | None = None
    everything: bool = False

    def matches(self, letter: DeadLetter) -> bool:
        if self.event_ids and letter.event_id not in self.event_ids:
            return False
        if self.error_class:
            cls = letter.error_class or ""
            if not (cls == self.error_class or cls.startswith(self.error_class + ":") or cls.split(":")[-1] == self.error_class):
                return False
        if self.group and letter.group != self.group:
            return False
        return True


def read_dead_letters(
    kafka: Kafka,
    topics: list[str],
    selection: Selection,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    max_scan: int = DEFAULT_MAX_SCAN,
    progress: Callable[[int, int], None] | None = None,
    codec: AvroCodec | None = None,
) -> tuple[list[DeadLetter], int, bool]:
    """(matching dead letters, records scanned, complete) over ``topics``, dead-lettered in
    [``since``, ``until``) when given."""
    codec = codec or AvroCodec()
    starts, ends = kafka.read_ranges(  # a topic deleted since the listing is left out
        topics,
        since_ms=int(since.timestamp() * 1000) if since else None,
        until_ms=int(until.timestamp() * 1000) if until else None,
    )
    total = sum(max(0, ends[tp] - starts[tp]) for tp in starts)
    letters, scanned = [], 0
    for msg in kafka.scan(starts, ends, max_records=max_scan, progress=progress):
        scanned += 1
        letter = DeadLetter(render(msg, codec))
        if selection.matches(letter):
            letters.append(letter)
    letters.sort(key=_dead_letter_position)
    return letters, scanned, scanned >= total


def is_ref(text: str) -> bool:
    """True when ``text`` is a dead letter's ref ``TOPIC.dlq:PARTITION:OFFSET``; anything else is
    taken for an event id (which may itself hold ``:``, as a stock outbox's ids can)."""
    parts = text.rsplit(":", 2)
    return len(parts) == 3 and parts[0].endswith(DLQ_SUFFIX) and parts[1].isdigit() and parts[2].isdigit()


def find_by_ref(kafka: Kafka, ref: str, codec: AvroCodec | None = None) -> DeadLetter:
    """The dead letter at ``topic:partition:offset``."""
    topic, _, rest = ref.rpartition(":")
    topic, _, part = topic.rpartition(":")
    kafka.require_topic(topic)
    msg = kafka.read_one(topic, int(part), int(rest))
    if msg is None or msg.offset() != int(rest):
        raise IncidentError(f"no record at {ref}", fix="`postbox dlq list` shows the dead letters and their refs")
    return DeadLetter(render(msg, codec))


@dataclass
class ReplayItem:
    letter: DeadLetter
    topic: str
    partition: int | None
    age: timedelta | None
    status: str  # "ready" | "unsafe" | "duplicate" | "no-origin"
    reason: str = ""
    applied_by: list[dict[str, Any]] = field(default_factory=list)
    sent: dict[str, Any] | None = None
    #: For a reference-only dead letter: the original record read back from its origin.
    original: RecordView | None = None

    def record_to_send(self) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
        """(key, value, headers) to produce: the dead letter's, or the original's it refers to."""
        source = self.original if self.original is not None else self.letter.record
        kept = [(k, v) for k, v in source.raw_headers if not k.startswith(dlq_record.DLQ_HEADER_PREFIX)]
        return source.raw_key, source.raw_value, kept + [(REPLAY_OF_HEADER, self.letter.ref.encode())]

    def as_dict(self) -> dict[str, Any]:
        return {
            "ref": self.letter.ref,
            "event_id": self.letter.event_id,
            "error_class": self.letter.error_class,
            "group": self.letter.group,
            "to": {"topic": self.topic, "partition": self.partition},
            "created_at": iso(self.letter.created_at),
            "age_seconds": round(self.age.total_seconds()) if self.age is not None else None,
            "status": self.status,
            "reason": self.reason,
            "applied_by": self.applied_by,
            "sent": self.sent,
        }


def plan_replay(
    kafka: Kafka,
    letters: list[DeadLetter],
    *,
    marker_ttl: timedelta,
    margin: timedelta = DEFAULT_SAFETY_MARGIN,
    force: bool = False,
    now: datetime | None = None,
    group_ttls: Mapping[str, timedelta] | None = None,
) -> list[ReplayItem]:
    """One item per dead letter: where it goes and whether replaying it is safe.

    ``group_ttls``: the marker TTL each group published (:mod:`postbox.effects.groups`); None when
    the operator fixed one with --marker-ttl / POSTBOX_MARKER_TTL. The replayed record reaches
    every group reading its origin topic, so it is safe only while the SHORTEST-lived marker of
    those groups (and of the group that dead-lettered it) still holds the event; a group that
    published nothing counts with ``marker_ttl``."""
    now = now or datetime.now(timezone.utc)
    items: list[ReplayItem] = []
    seen: dict[tuple[str, str | None], ReplayItem] = {}
    partitions_of: dict[str, int] = {}
    readers_of: dict[str, list[str]] = {}
    # newest dead letter of an event first, so a duplicate points at the one that is replayed;
    # the items are reversed at the end and sent in that order, so the whole position breaks
    # timestamp ties: one batch's dead letters share a millisecond, and an aggregate's must go
    # back in the order they were dead-lettered (its offsets in its dead-letter partition)
    for letter in sorted(letters, key=_dead_letter_position, reverse=True):
        item = _new_item(kafka, letter, now, partitions_of)
        topic = item.topic
        dedupe = (topic, letter.event_id)
        if letter.event_id and dedupe in seen:
            item.status, item.reason = "duplicate", f"same event as {seen[dedupe].letter.ref} (replayed once)"
        elif partitions_of[topic] == 0:
            item.status, item.reason = "no-origin", f"origin topic {topic} does not exist"
        else:
            _judge_age(kafka, item, marker_ttl=marker_ttl, margin=margin, force=force, group_ttls=group_ttls, readers_of=readers_of)
        _fetch_original(kafka, item)
        if letter.event_id and dedupe not in seen:
            seen[dedupe] = item
        items.append(item)
    items.reverse()
    return _in_origin_order(items)


def _new_item(kafka: Kafka, letter: DeadLetter, now: datetime, partitions_of: dict[str, int]) -> ReplayItem:
    """A dead letter's replay item, ``ready`` until judged: its origin topic, its age and its origin
    partition while the topic still has it. ``partitions_of`` caches each topic's partition count
    (0: the topic is gone)."""
    topic = letter.origin_topic
    if topic not in partitions_of:
        partitions_of[topic] = len(kafka.partitions(topic)) if kafka.topic_exists(topic) else 0
    created = letter.created_at
    age = now - created if created else None
    partition = letter.origin_partition
    if partition is not None and not 0 <= partition < partitions_of[topic]:
        partition = None  # partition count changed: let the key choose (murmur2, like Java)
    return ReplayItem(letter, topic, partition, age, "ready")


def _judge_age(
    kafka: Kafka, item: ReplayItem, *, marker_ttl: timedelta, margin: timedelta, force: bool,
    group_ttls: Mapping[str, timedelta] | None, readers_of: dict[str, list[str]],
) -> None:
    """Mark an item ``unsafe`` (``ready`` with ``force``, the reason kept) when its age is unknown or
    past the shortest marker TTL, less ``margin``, of the groups that may have applied it.
    ``readers_of`` caches each topic's groups (read only when groups published their TTLs)."""
    letter, topic, age = item.letter, item.topic, item.age
    if age is None:
        item.status = "unsafe" if not force else "ready"
        item.reason = "creation time unknown: cannot tell whether dedupe markers still exist"
        return
    if group_ttls is not None and topic not in readers_of:
        readers_of[topic] = sorted(kafka.groups_on_topic(topic))
    ttl, whose = shortest_ttl(marker_ttl, group_ttls, [*readers_of.get(topic, ()), *([letter.group] if letter.group else [])])
    if age >= ttl - margin:
        item.status = "unsafe" if not force else "ready"
        item.reason = (
            f"created {human_duration(age)} ago; dedupe markers{f' of group {whose}' if whose else ''} live"
            f" {human_duration(ttl)} (margin {human_duration(margin)}): a group that applied it may apply it again"
            + (" (--force given)" if force else "")
        )


def _in_origin_order(items: list[ReplayItem]) -> list[ReplayItem]:
    """``items`` with each origin partition's dead letters in their origin order, in the places
    that partition's items already take. Dead letters are written in their events' order except
    one refused as too large, which the consumer writes again, reference-only, after the rest of
    its batch; an aggregate's events (one origin partition) must go back in the order they had."""
    slots: dict[tuple[str, int], list[int]] = {}
    for index, item in enumerate(items):
        letter = item.letter
        if letter.origin_partition is not None and letter.origin_offset is not None:
            slots.setdefault((letter.origin_topic, letter.origin_partition), []).append(index)
    ordered = list(items)
    for indexes in slots.values():
        by_origin = sorted((items[i] for i in indexes), key=lambda item: item.letter.origin_offset or 0)
        for index, item in zip(indexes, by_origin):
            ordered[index] = item
    return ordered


def _dead_letter_position(letter: DeadLetter) -> tuple[int, str, int, int]:
    """When and where a dead letter was written: the order replay sends them back in."""
    record = letter.record
    return (record.timestamp_ms or 0, record.topic, record.partition, record.offset)


def _fetch_original(kafka: Kafka, item: ReplayItem) -> None:
    """Read a reference-only dead letter's original record, or mark the item ``no-origin``."""
    letter = item.letter
    if item.status != "ready" or not letter.reference_only:
        return
    where = f"{letter.origin_topic}[{letter.origin_partition}]@{letter.origin_offset}"
    if letter.origin_partition is None or letter.origin_offset is None:
        item.status, item.reason = "no-origin", "reference-only dead letter without its origin partition/offset"
        return
    msg = kafka.read_one(letter.origin_topic, letter.origin_partition, letter.origin_offset)
    if msg is None or msg.offset() != letter.origin_offset:
        item.status = "no-origin"
        item.reason = (f"reference-only dead letter: its original record at {where} is no longer in the topic"
                       " (retention); nothing to replay")
        return
    original = render(msg)
    if letter.event_id and original.meta.event_id != letter.event_id:
        item.status = "no-origin"
        item.reason = f"reference-only dead letter: the record at {where} is event {original.meta.event_id}, not {letter.event_id}"
        return
    item.original = original
    item.reason = f"reference-only: sends the original record read from {where}"


def send(kafka: Kafka, items: list[ReplayItem]) -> int:
    """Produce every ``ready`` item (acks=all, flushed); returns how many were acknowledged."""
    producer = kafka.producer()
    pending = [i for i in items if i.status == "ready"]

    for item in pending:
        def delivered(err: Any, msg: Any, item: ReplayItem = item) -> None:
            if err is not None:
                item.sent = {"error": str(err)}
            else:
                item.sent = {"topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset()}

        kwargs: dict[str, Any] = {}
        if item.partition is not None:
            kwargs["partition"] = item.partition
        key, value, headers = item.record_to_send()
        producer.produce(item.topic, key=key, value=value, headers=headers, on_delivery=delivered, **kwargs)
        producer.poll(0)
    remaining = producer.flush(max(kafka.timeout * 3, 15))
    ok = 0
    for item in pending:
        if item.sent is None:
            item.sent = {"error": "no delivery report (broker did not acknowledge in time)"}
        if "error" in item.sent:
            item.status = "failed"
        else:
            item.status = "sent"
            ok += 1
    del remaining
    return ok


@dataclass
class ReplayReport:
    """`postbox dlq replay`: the dead letters read, one planned (then sent) item each, the audit."""

    topics: list[str]
    scanned: int
    complete: bool
    items: list[ReplayItem]
    marker_ttl: timedelta
    margin: timedelta
    executed: bool = False
    audit: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    def having(self, status: str) -> list[ReplayItem]:
        return [i for i in self.items if i.status == status]

    @property
    def destinations(self) -> str:
        return ", ".join(sorted({i.topic for i in self.items if i.status in ("ready", "sent", "failed")}))

    @property
    def problem(self) -> bool:
        """Something the engineer must look at: refused, failed, or sent without an audit record."""
        sent_unaudited = self.executed and bool(self.having("sent") or self.having("failed")) and self.audit is None
        return bool(self.having("unsafe") or self.having("failed") or sent_unaudited)

    def summary(self) -> dict[str, int]:
        return {s: len(self.having(s)) for s in ("ready", "sent", "failed", "unsafe", "duplicate", "no-origin")}

    def as_dict(self) -> dict[str, Any]:
        return {
            "dry_run": not self.executed, "topics": self.topics, "scanned": self.scanned, "complete": self.complete,
            "marker_ttl_seconds": self.marker_ttl.total_seconds(), "safety_margin_seconds": self.margin.total_seconds(),
            "items": [i.as_dict() for i in self.items], "summary": self.summary(), "audit": self.audit,
            "already_applied": sum(1 for i in self.items if i.applied_by), "notes": self.notes,
        }


def shortest_ttl(fallback: timedelta, published: Mapping[str, timedelta] | None, groups: list[str]) -> tuple[timedelta, str | None]:
    """The shortest marker TTL of ``groups`` (a group that published none counts with
    ``fallback``) and the group it belongs to (None: ``fallback`` is the shortest, or
    ``published`` is None because the operator fixed the TTL)."""
    if published is None:
        return fallback, None
    best: tuple[timedelta, str | None] = (fallback, None)
    for group in groups:
        ttl = published.get(group)
        if ttl is not None and ttl < best[0]:
            best = (ttl, group)
    return best


def prepare_replay(
    kafka: Kafka, topics: list[str], selection: Selection, *, marker_ttl: timedelta, margin: timedelta, force: bool,
    redis_state: RedisState | None = None, progress: Callable[[int, int], None] | None = None,
    since: datetime | None = None, until: datetime | None = None, group_ttls: Mapping[str, timedelta] | None = None,
) -> ReplayReport:
    """Read the selected dead letters, plan each one's replay (held back when it would follow later
    events of its aggregate: :mod:`postbox.incident.replay_order`) and find the groups that already
    applied its event (their dedupe marker exists: they will skip the replayed copy). Nothing is sent."""
    letters, scanned, complete = read_dead_letters(kafka, topics, selection, progress=progress, since=since, until=until)
    if not letters:
        raise IncidentError("no dead letter matches the selection", fix="`postbox dlq list` shows the dead letters")
    items = plan_replay(kafka, letters, marker_ttl=marker_ttl, margin=margin, force=force, group_ttls=group_ttls)
    hold_out_of_order(kafka, items, force=force)
    report = ReplayReport(topics, scanned, complete, items, marker_ttl, margin)
    if redis_state is None:
        report.notes.append("Redis not consulted: which groups already applied each event is unknown")
        return report
    try:
        find_applied(kafka, redis_state, items, marker_ttl)
    except PostboxError as exc:
        report.notes.append(f"cannot tell which groups already applied the events: {exc.message}")
    return report


def find_applied(kafka: Kafka, redis_state: RedisState, items: list[ReplayItem], marker_ttl: timedelta) -> None:
    """Fill each item's ``applied_by``: the groups reading its origin topic (or named in its dead
    letter) whose dedupe marker for the event still exists."""
    groups_of: dict[str, list[str]] = {}
    for item in items:
        event_id = item.letter.event_id
        if not event_id or item.status == "no-origin":
            continue
        if item.topic not in groups_of:
            groups_of[item.topic] = sorted(kafka.groups_on_topic(item.topic))
        record = item.original or item.letter.record
        aggregate = record.meta.aggregate_type or item.topic.removeprefix(TOPIC_PREFIX)
        anchors = [f"{aggregate}:{record.key}"] if record.key is not None else []
        names = sorted(set(groups_of[item.topic]) | ({item.letter.group} if item.letter.group else set()))
        for group in names:
            marker = redis_state.find_marker(group, event_id, anchors)
            if marker is not None and marker.verdict is None:  # a failure verdict: the group did not apply it
                item.applied_by.append({"group": group, "marker": marker.key,
                                        "applied_at_estimate": iso(marker.applied_at(marker_ttl)), "expires_at": iso(marker.expires_at())})


def execute_replay(kafka: Kafka, report: ReplayReport) -> int:
    """Send the report's ready items (their status becomes sent or failed); how many were acknowledged."""
    report.executed = True
    return send(kafka, report.having("ready"))


def replay_audit(report: ReplayReport, selection: dict[str, Any], force: bool) -> Any:
    """The audit record of an executed replay: the selection, and each item's outcome."""
    from postbox.incident.audit import AuditRecord

    sent, tried = len(report.having("sent")), len(report.having("sent")) + len(report.having("failed"))
    return AuditRecord(
        command="dlq replay", target=report.destinations, count=sent, outcome="ok" if sent == tried else "partial",
        details={"selection": selection, "force": force, "marker_ttl_s": report.marker_ttl.total_seconds(),
                 "refused_unsafe": len(report.having("unsafe")),
                 "items": [{"ref": i.letter.ref, "event_id": i.letter.event_id, "status": i.status, "sent": i.sent} for i in report.items]},
    )
