"""`postbox reconcile`: the comparison of the three hops of a window, as pure functions over values.

The readers (:mod:`postbox.incident.reconcile_read`) gather what each hop still holds: the outbox
rows created in the window (while retained), the Kafka records carrying those event ids, and per
consumer group its committed offsets, its markers and its dead letters. This module decides, with
no I/O, what became of each event:

- **Kafka**: published (one record), doubled (several records with the id: a re-send), or missing
  (an outbox row with no record);
- **per group**, for the event's first record: *applied* (the marker says ``1``), *dead-lettered*
  (in the group's ``<topic>.dlq``, or the marker holds a failure verdict), *pending* (the record
  is at or after the group's committed offset), *missing* (committed past, no marker, no dead
  letter), or *unknown: marker gone* when no marker can prove it any more: the record is older
  than the group's marker TTL (a marker lives at most that long after its apply, and no apply is
  earlier than the record), or the Redis evicted keys (the reader says when it may have). Never
  counted as applied, nor as missing: an evicted marker says nothing of the effect.

Anything missing makes the exit code 1; nothing missing but some event unproven (marker gone)
makes it 3, so a script cannot read "could not prove it" as "nothing lost" (2 stays the usage
error, as in every command). Each finding carries the fix to run (never run here).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from postbox.effects.verdicts import is_verdict, parse_verdict
from postbox.incident.redis_state import iso

APPLIED = "applied"
DEAD_LETTERED = "dead-lettered"
PENDING = "pending"
MISSING = "missing"
MARKER_GONE = "unknown: marker gone"
GROUP_STATES = (APPLIED, DEAD_LETTERED, PENDING, MISSING, MARKER_GONE)
#: Exit codes: something is missing (act on it); nothing is missing but some events are unproven.
EXIT_MISSING = 1
EXIT_UNKNOWN = 3


@dataclass(frozen=True)
class Row:
    """An outbox row of the window."""

    event_id: str
    aggregate_type: str
    aggregate_id: str
    created_at: datetime


@dataclass(frozen=True)
class Copy:
    """A Kafka record carrying an event id (the ``id`` header)."""

    event_id: str
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    created_at: datetime
    #: The record's key and ``aggregate_type`` header: the marker's routing tag ``<type>:<key>``.
    key: str | None = None
    aggregate_type: str | None = None

    @property
    def place(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


@dataclass(frozen=True)
class GroupState:
    """What one consumer group holds: committed offsets, markers found (event id → value), the
    event ids in its dead letters, its marker TTL, and why its markers may be gone early (None:
    the Redis cannot evict)."""

    group: str
    committed: Mapping[tuple[str, int], int]
    markers: Mapping[str, bytes]
    dead_letters: frozenset[str]
    marker_ttl: timedelta
    eviction: str | None = None


@dataclass(frozen=True)
class OutboxState:
    """The outbox hop: rows of the window (None when they could not be read, with the reason) and
    the oldest retained row's creation time (None: the table holds no row)."""

    rows: Sequence[Row] | None
    oldest_retained: datetime | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Window:
    since: datetime
    until: datetime
    now: datetime
    #: ``--pipeline`` to repeat in the fixes (None for the default pipeline).
    pipeline: str | None = None


@dataclass
class Finding:
    """One event that is missing, doubled, dead-lettered or unproven, with where it was last seen
    and the command that fixes it (None when nothing needs fixing)."""

    event_id: str
    kind: str
    hop: str
    last_seen: str
    fix: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"event_id": self.event_id, "kind": self.kind, "hop": self.hop, "last_seen": self.last_seen, "fix": self.fix}


@dataclass
class GroupSummary:
    group: str
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(GROUP_STATES, 0))
    #: Doubled events this group applied once (its marker absorbed the copies).
    doubled_applied_once: int = 0
    eviction: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"group": self.group, **{k.replace("unknown: ", "").replace(" ", "_").replace("-", "_"): v for k, v in self.counts.items()},
                "doubled_applied_once": self.doubled_applied_once, "eviction": self.eviction}


@dataclass
class Reconciliation:
    window: Window
    outbox_rows: int | None
    oldest_retained: datetime | None
    retention_cut: bool
    events: int
    published: int
    records: int
    doubled: int
    missing_in_kafka: int
    kafka_only: int
    groups: list[GroupSummary]
    findings: list[Finding]
    notes: list[str]

    @property
    def missing(self) -> int:
        return self.missing_in_kafka + sum(g.counts[MISSING] for g in self.groups)

    @property
    def unknown(self) -> int:
        """Events of the window no group's marker can prove any more (marker gone)."""
        return sum(g.counts[MARKER_GONE] for g in self.groups)

    @property
    def exit_code(self) -> int:
        return EXIT_MISSING if self.missing else (EXIT_UNKNOWN if self.unknown else 0)

    def as_dict(self) -> dict[str, Any]:
        return {
            "window": {"since": iso(self.window.since), "until": iso(self.window.until)},
            "outbox": {"rows": self.outbox_rows, "oldest_retained": iso(self.oldest_retained), "retention_cut": self.retention_cut},
            "kafka": {"events": self.published, "records": self.records, "doubled": self.doubled,
                      "missing": self.missing_in_kafka, "not_in_outbox": self.kafka_only},
            "events": self.events, "missing": self.missing, "unknown": self.unknown, "exit_code": self.exit_code,
            "groups": [g.as_dict() for g in self.groups],
            "findings": [f.as_dict() for f in self.findings],
            "notes": self.notes,
        }  # fmt: skip


def in_window(created: datetime, window: Window) -> bool:
    return window.since <= created < window.until


def group_state(copy: Copy, group: GroupState, now: datetime) -> str:
    """What became of ``copy`` (an event's first record) in ``group``."""
    value = group.markers.get(copy.event_id)
    if value is not None:
        return DEAD_LETTERED if is_verdict(value) else APPLIED
    if copy.event_id in group.dead_letters:
        return DEAD_LETTERED
    committed = group.committed.get((copy.topic, copy.partition))
    if committed is None or committed <= copy.offset:
        return PENDING
    if group.eviction is not None or _expired(copy, group, now):
        return MARKER_GONE
    return MISSING


def _expired(copy: Copy, group: GroupState, now: datetime) -> bool:
    """Whether the record is older than the group's marker TTL: its marker is gone whatever happened."""
    recorded = datetime.fromtimestamp(copy.timestamp_ms / 1000, tz=now.tzinfo)
    return now - min(recorded, copy.created_at) >= group.marker_ttl


def first_copies(copies: Sequence[Copy], window: Window) -> dict[str, list[Copy]]:
    """The window's records by event id, each event's in log order (its first record first)."""
    by_id: dict[str, list[Copy]] = {}
    for copy in copies:
        if in_window(copy.created_at, window):
            by_id.setdefault(copy.event_id, []).append(copy)
    for found in by_id.values():
        found.sort(key=lambda c: (c.timestamp_ms, c.topic, c.partition, c.offset))
    return by_id


def reconcile(window: Window, outbox: OutboxState, copies: Sequence[Copy], groups: Sequence[GroupState]) -> Reconciliation:
    """The window's comparison: per hop, per group, and every finding with its fix."""
    by_id = first_copies(copies, window)
    rows = {r.event_id: r for r in outbox.rows or () if in_window(r.created_at, window)}
    findings: list[Finding] = []
    missing_rows = [r for eid, r in sorted(rows.items(), key=lambda kv: (kv[1].created_at, kv[0])) if eid not in by_id]
    findings += _missing_in_kafka(missing_rows, window)
    doubled = {eid: found for eid, found in by_id.items() if len(found) > 1}
    summaries = [_group(g, by_id, doubled, window, findings) for g in groups]
    findings += [Finding(eid, "doubled", "kafka", ", ".join(c.place for c in found)) for eid, found in sorted(doubled.items())]
    readable = outbox.rows is not None
    return Reconciliation(
        window=window, outbox_rows=len(rows) if readable else None, oldest_retained=outbox.oldest_retained,
        retention_cut=_retention_cut(outbox, window), events=len(set(rows) | set(by_id)), published=len(by_id),
        records=sum(len(v) for v in by_id.values()), doubled=len(doubled), missing_in_kafka=len(missing_rows),
        kafka_only=len(set(by_id) - set(rows)) if readable else 0, groups=summaries, findings=findings,
        notes=_outbox_notes(outbox, window),
    )  # fmt: skip


def _retention_cut(outbox: OutboxState, window: Window) -> bool:
    """Whether retention already dropped rows of the window (the oldest retained is newer than its start)."""
    return outbox.rows is not None and (outbox.oldest_retained is None or outbox.oldest_retained > window.since)


def _outbox_notes(outbox: OutboxState, window: Window) -> list[str]:
    if outbox.rows is None:
        return [f"the outbox rows could not be read ({outbox.reason or 'no reason given'}): Kafka ↔ groups only"]
    if not _retention_cut(outbox, window):
        return []
    if outbox.oldest_retained is None:
        return ["the outbox holds no row (retention dropped the window, or rows are deleted as they are written): Kafka ↔ groups only"]
    return [f"retention already dropped the rows created before {iso(outbox.oldest_retained)}: "
            "events before it are compared Kafka ↔ groups only"]  # fmt: skip


def _missing_in_kafka(missing: list[Row], window: Window) -> list[Finding]:
    if not missing:
        return []
    pipeline = f" --pipeline {window.pipeline}" if window.pipeline else ""
    fix = f"postbox db republish --since {iso(missing[0].created_at)}{pipeline}"
    return [Finding(r.event_id, MISSING, "kafka", f"outbox row ({r.aggregate_type}/{r.aggregate_id}, created {iso(r.created_at)})", fix)
            for r in missing]  # fmt: skip


def _group(group: GroupState, by_id: Mapping[str, list[Copy]], doubled: Mapping[str, list[Copy]], window: Window,
           findings: list[Finding]) -> GroupSummary:  # fmt: skip
    summary = GroupSummary(group.group, eviction=group.eviction)
    missing: list[Copy] = []
    for eid in sorted(by_id, key=lambda e: (by_id[e][0].timestamp_ms, e)):
        first = by_id[eid][0]
        state = group_state(first, group, window.now)
        summary.counts[state] += 1
        if state == APPLIED and eid in doubled:
            summary.doubled_applied_once += 1
        elif state == MISSING:
            missing.append(first)
        elif state == DEAD_LETTERED:
            findings.append(_dead_letter(first, group))
        elif state == MARKER_GONE:
            findings.append(_marker_gone(first, group, window.now))
    replay = _replay_fix(group.group, missing)
    findings += [Finding(c.event_id, MISSING, group.group, f"{c.place}, committed past; no marker, no dead letter", replay) for c in missing]
    return summary


def _marker_gone(first: Copy, group: GroupState, now: datetime) -> Finding:
    expired = _expired(first, group, now)
    why = f"the record is older than the group's marker TTL ({_days(group.marker_ttl)})" if expired or not group.eviction else group.eviction
    where = f" (by default under {{{first.aggregate_type}:{first.key}}})" if first.aggregate_type and first.key is not None else ""
    return Finding(first.event_id, MARKER_GONE, group.group, f"{first.place}, committed past; no marker: {why}",
                   f"postbox trace {first.event_id}, then look for the event's effect in the handler's keys{where}: "
                   f"there → applied, nothing to do; not there → replay it (a replay of an applied event applies it twice)")


def _replay_fix(group: str, missing: list[Copy]) -> str | None:
    """One reset that re-reads every missing record of ``group``: from the earliest one's time."""
    if not missing:
        return None
    topics = "".join(f" --topic {t}" for t in sorted({c.topic for c in missing}))
    return (f"postbox replay --group {group}{topics} --to {_iso_ms(min(c.timestamp_ms for c in missing))}"
            " (with the group stopped; its markers skip what it applied)")


def _dead_letter(first: Copy, group: GroupState) -> Finding:
    value = group.markers.get(first.event_id)
    verdict = parse_verdict(value) if value is not None else None
    replay = f"postbox dlq replay --topic {first.topic} --event-id {first.event_id} --group {group.group} (once the cause is fixed)"
    if verdict is not None and not verdict.delivered and first.event_id not in group.dead_letters:
        return Finding(first.event_id, DEAD_LETTERED, group.group,
                       f"{first.place}, failed ({verdict.error_class}): its verdict is in the group's marker, its dead letter owed",
                       f"start the group: it writes the dead letter when it reads the record again; then {replay}")
    return Finding(first.event_id, DEAD_LETTERED, group.group, f"{first.place}, dead-lettered to {first.topic}.dlq", replay)


def _iso_ms(timestamp_ms: int) -> str:
    from postbox.incident.records import iso_ms

    return iso_ms(timestamp_ms) or str(timestamp_ms)


def _days(ttl: timedelta) -> str:
    from postbox.redelivery import human

    return human(ttl)


__all__ = ["APPLIED", "Copy", "DEAD_LETTERED", "EXIT_MISSING", "EXIT_UNKNOWN", "Finding", "GroupState", "MARKER_GONE", "MISSING", "OutboxState", "PENDING",
           "Reconciliation", "Row", "Window", "group_state", "reconcile"]  # fmt: skip
