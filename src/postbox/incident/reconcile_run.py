"""`postbox reconcile`'s run: open the connections, read each hop (:mod:`reconcile_read`), compare
(:mod:`reconcile`), and the audit record of the run. The CLI only parses and renders."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from postbox.incident import reconcile_read as read
from postbox.incident.audit import AuditRecord
from postbox.incident.reconcile import GroupState, Reconciliation, Window, reconcile
from postbox.incident.redis_state import RedisState, iso, marker_ttl, published_marker_ttls
from postbox.incident.trace import reading_database_url
from postbox.kafka_cluster import Kafka
from postbox.pipelines import DEFAULT, Pipeline
from postbox.settings import Settings
from postbox.topics import DLQ_SUFFIX, TOPIC_PREFIX, topic_for

DEFAULT_MAX_SCAN = 5_000_000
ProgressFactory = Callable[[str], Callable[[int, "int | None"], None]]


@dataclass(frozen=True)
class ReconcileRequest:
    """What `postbox reconcile` was asked (its flags, parsed)."""

    since: datetime
    until: datetime
    aggregate_type: str | None = None
    groups: tuple[str, ...] = ()
    marker_ttl_flag: str | None = None
    database_url: str | None = None
    local_maint_url: str | None = None
    max_scan: int = DEFAULT_MAX_SCAN
    pipeline: Pipeline = DEFAULT


def _quiet(label: str) -> Callable[[int, "int | None"], None]:
    def nothing(done: int, total: int | None = None) -> None:
        return None

    return nothing


def run_reconcile(request: ReconcileRequest, settings: Settings, progress_factory: ProgressFactory = _quiet,
                  now: datetime | None = None) -> Reconciliation:  # fmt: skip
    """Every hop of the window read, then compared."""
    now = now or datetime.now(timezone.utc)
    url, source = reading_database_url(request.database_url, settings.database_url, request.local_maint_url)
    outbox = read.read_outbox(url, source, request.since, request.until, request.aggregate_type, request.pipeline)
    state = RedisState(settings.redis_url)
    try:
        state.ping()
        with Kafka(settings.kafka_bootstrap, properties=settings.kafka_properties) as kafka:
            kafka.ping()
            topics = _topics(kafka, request.aggregate_type)
            copies, scanned, complete = read.read_copies(kafka, topics, request.since, request.until, max_scan=request.max_scan,
                                                         progress=progress_factory(f"reading {len(topics)} topic(s)"))  # fmt: skip
            letters, letters_complete = read.read_dead_letters(kafka, topics, request.since, max_scan=request.max_scan,
                                                               progress=progress_factory("reading the dead-letter topics"))  # fmt: skip
            committed = _committed(kafka, topics, request.groups)
        window = Window(request.since, request.until, now, None if request.pipeline == DEFAULT else request.pipeline.name)
        mine = [c for c in copies if window.since <= c.created_at < window.until]
        groups, marker_notes = _group_states(state, committed, mine, letters, request, now, progress_factory)
    finally:
        state.close()
    result = reconcile(window, outbox, copies, groups)
    result.notes.extend(marker_notes)
    if not complete:
        result.notes.append(f"the Kafka read stopped after {scanned:,} records (--max-scan): raise it to see the whole window")
    if not letters_complete:
        result.notes.append("the dead-letter read stopped at --max-scan: some dead letters may be counted as missing")
    if not topics:
        result.notes.append("no outbox topic exists" + (f" for aggregate type {request.aggregate_type}" if request.aggregate_type else ""))
    return result


def _topics(kafka: Kafka, aggregate_type: str | None) -> list[str]:
    if aggregate_type:
        return [t for t in [topic_for(aggregate_type)] if kafka.topic_exists(t)]
    return [t for t in kafka.topic_names() if t.startswith(TOPIC_PREFIX) and not t.endswith(DLQ_SUFFIX)]


def _committed(kafka: Kafka, topics: list[str], groups: tuple[str, ...]) -> dict[str, dict[tuple[str, int], int]]:
    """{group: committed offsets on ``topics``}: the groups named, else every group with commits there."""
    wanted = set(topics)
    out = {}
    for group in groups or tuple(kafka.group_ids()):
        offsets = {tp: o for tp, o in kafka.committed(group).items() if tp[0] in wanted}
        if offsets or groups:
            out[group] = offsets
    return out


def _group_states(state: RedisState, committed: dict[str, dict[tuple[str, int], int]], copies: list[Any],
                  letters: dict[str | None, set[str]], request: ReconcileRequest, now: datetime,
                  progress_factory: ProgressFactory) -> tuple[list[GroupState], list[str]]:  # fmt: skip
    """Each group's state, and notes (a marker search that could not run)."""
    ttls = published_marker_ttls(state.client, request.marker_ttl_flag) or {}
    fallback = marker_ttl(request.marker_ttl_flag)
    evicting = read.eviction(state.client, request.since, now)
    anyone = letters.get(None, set())
    out, notes = [], []
    for group, offsets in sorted(committed.items()):
        consumed = {topic for topic, _ in offsets}
        own = [c for c in copies if c.topic in consumed]  # a group has no marker of a topic it never read
        dead = frozenset(letters.get(group, set()) | anyone)
        markers = read.read_markers(state.client, group, own, namespace=state.namespace,
                                    progress=progress_factory(f"reading the markers of group {group}"))  # fmt: skip
        unproven = {c.event_id for c in own if c.event_id not in markers and c.event_id not in dead
                    and offsets.get((c.topic, c.partition), -1) > c.offset}  # fmt: skip
        found, searched = read.scan_markers(state.client, group, unproven, namespace=state.namespace, max_keys=request.max_scan,
                                            progress=progress_factory(f"searching group {group}'s markers under other tags"))  # fmt: skip
        markers.update(found)
        if not searched:
            notes.append(f"group {group}: {len(unproven):,} event(s) without a marker under their aggregate's tag; the Redis holds more "
                         "keys than --max-scan, so markers under a handler's own routing key were not searched (raise --max-scan)")
        out.append(GroupState(group, offsets, markers, dead, ttls.get(group, fallback), evicting))
    return out, notes


def reconcile_audit(request: ReconcileRequest, result: Reconciliation) -> AuditRecord:
    """The run's audit record: which window, how many events, how many missing."""
    target = f"{iso(request.since)}..{iso(request.until)}" + (f" {request.aggregate_type}" if request.aggregate_type else "")
    return AuditRecord(
        command="reconcile", target=target, count=result.events, outcome=_outcome(result),
        details={"groups": [g.group for g in result.groups], "missing": result.missing, "unknown": result.unknown, "doubled": result.doubled,
                 "pipeline": request.pipeline.name},
    )  # fmt: skip


def _outcome(result: Reconciliation) -> str:
    if result.missing:
        return f"missing {result.missing}"
    return f"unknown {result.unknown}" if result.unknown else "ok"


def window_length(request: ReconcileRequest) -> timedelta:
    return request.until - request.since


__all__ = ["ReconcileRequest", "reconcile_audit", "run_reconcile"]
