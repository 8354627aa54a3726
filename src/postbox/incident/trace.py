"""`postbox trace EVENT_ID`: one event's whole path, from the outbox row to each group's effect.

1. **Outbox row** (while retention has not removed it): read with a role that may read the outbox.
   The app role can only INSERT, so this uses ``--database-url`` / ``POSTBOX_ADMIN_DATABASE_URL`` /
   ``POSTBOX_MAINT_DATABASE_URL`` (the maintenance role acts through ``SET ROLE postbox_owner``), or
   the local stack's maintenance role; with the app role the row is reported as *unreadable*.
2. **Kafka record**: topic ``outbox.event.<aggregate_type>`` (every outbox topic when the type is not
   known), searched by the ``id`` header. UUIDv7 ids carry their creation time, so the scan starts
   at that time minus a margin (``offsets_for_times``) instead of the beginning; it is bounded by
   ``--max-scan`` and shows progress.
3. **Per consumer group** with committed offsets on the topic (or ``--group``): committed offset
   past the record or not; dedupe marker (applied, with the time derived from its TTL); dead
   letters for the event in ``<topic>.dlq``; records in the group's failure stream.
4. **Verdict**, one line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from postbox.codec import AvroCodec
from postbox.errors import IncidentError, PostboxError
from postbox.incident.dlq import DeadLetter
from postbox.kafka_cluster import Kafka
from postbox.topics import DLQ_SUFFIX, TOPIC_PREFIX, topic_for
from postbox.ids import parse_event_id  # noqa: F401 - the one event-id rule, re-exported for the CLI
from postbox.pipelines import DEFAULT, Pipeline
from postbox.incident.records import RecordView, iso_ms, render, uuid7_time
from postbox.effects.verdicts import Verdict
from postbox.incident.redis_state import Marker, RedisState, human_duration, iso, published_marker_ttls
from postbox.secret_env import env_source, env_value
from postbox.settings import Settings

ADMIN_ENV = "POSTBOX_ADMIN_DATABASE_URL"
MAINT_ENV = "POSTBOX_MAINT_DATABASE_URL"
DEFAULT_MAX_SCAN = 2_000_000
#: How far before the UUIDv7 time the Kafka scan starts (clock skew between the app and Kafka).
START_MARGIN = timedelta(minutes=5)
#: After a hit, how much later the same partition is still read for duplicates (redeliveries).
DUPLICATE_WINDOW_MS = 10 * 60 * 1000


def _is_uuid(text: str) -> bool:
    import uuid

    try:
        return str(uuid.UUID(text)) == text
    except ValueError:
        return False


def reading_database_url(flag: str | None, app_url: str, local_maint_url: str | None = None) -> tuple[str, str]:
    """(url, source) of a connection that may read the outbox. ``local_maint_url``: the local
    stack's maintenance role, handed in by the CLI; used only when ``app_url`` is on this machine."""
    if flag:
        return flag, "--database-url"
    for var in (ADMIN_ENV, MAINT_ENV):
        url = env_value(var)
        if url:
            return url, env_source(var)
    if local_maint_url:
        from postbox.conninfo import host_is_local

        if host_is_local(app_url):
            return local_maint_url, "local stack (postbox_maint)"
    return app_url, "POSTBOX_DATABASE_URL (app role)"


def read_outbox_row(url: str, source: str, event_id: str, pipeline: Pipeline = DEFAULT) -> dict[str, Any]:
    """{"state": found|absent|unreadable|unreachable, ...} for the event's row in ``pipeline``'s outbox."""
    import psycopg

    if not _is_uuid(event_id):  # postbox's outbox ids are uuids: a stock outbox's "42" is not in it
        return {"state": "absent", "source": source, "reason": "not a UUID, so not an id of postbox's outbox table"}

    query = pipeline.sql(
        "SELECT aggregate_type, aggregate_id, event_type, created_at, octet_length(payload), traceparent,"
        " xmin::text, tableoid::regclass::text FROM {schema}.outbox WHERE id = %s"
    )
    try:
        with psycopg.connect(url, connect_timeout=5, autocommit=True) as conn:
            row = None
            try:
                row = conn.execute(query, (event_id,)).fetchone()
            except psycopg.errors.InsufficientPrivilege:
                try:  # postbox_maint is NOINHERIT: it reads only as postbox_owner
                    conn.execute("SET ROLE postbox_owner")
                    row = conn.execute(query, (event_id,)).fetchone()
                except psycopg.Error:
                    return {
                        "state": "unreadable", "source": source,
                        "reason": f"role {conn.info.user!r} may not read {pipeline.table} (the app role can only INSERT)",
                        "fix": f"pass --database-url with a reading role (postbox_maint or an admin), or set {MAINT_ENV}",
                    }
            if row is None:
                return {"state": "absent", "source": source}
            committed = None
            try:
                committed = conn.execute("SELECT pg_xact_commit_timestamp(%s::xid)", (row[6],)).fetchone()[0]
            except psycopg.Error:
                pass  # track_commit_timestamp off: created_at (the insert's clock time) is the best we have
            return {
                "state": "found", "source": source,
                "aggregate_type": row[0], "aggregate_id": row[1], "event_type": row[2],
                "created_at": iso(row[3]) if row[3] else None,
                "committed_at": iso(committed) if committed else None,
                "payload_bytes": row[4], "traceparent": row[5], "xid": row[6], "partition": row[7],
            }
    except psycopg.OperationalError as exc:
        return {"state": "unreachable", "source": source, "reason": str(exc).strip().splitlines()[0] if str(exc).strip() else "connection failed"}
    except psycopg.Error as exc:
        return {"state": "error", "source": source, "reason": str(exc).strip().splitlines()[0]}


@dataclass
class GroupTrace:
    group: str
    state: str = "unknown"
    members: int = 0
    committed: int | None = None
    end: int | None = None
    consumed: bool = False
    behind: int | None = None
    marker: dict[str, Any] | None = None
    dead_letters: list[dict[str, Any]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    status: str = "unknown"  # applied | dead-lettered | failed | waiting | consumed-no-marker
    summary: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "group": self.group, "status": self.status, "summary": self.summary,
            "group_state": self.state, "members": self.members,
            "committed_offset": self.committed, "end_offset": self.end,
            "consumed": self.consumed, "behind": self.behind,
            "marker": self.marker, "dead_letters": self.dead_letters, "failures": self.failures,
        }


@dataclass
class Trace:
    event_id: str
    outbox: dict[str, Any]
    topics_searched: list[str] = field(default_factory=list)
    scanned: int = 0
    scan_complete: bool = True
    records: list[RecordView] = field(default_factory=list)
    groups: list[GroupTrace] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    verdict: str = ""
    status: str = ""  # applied | dead-lettered | failed | waiting | published | not-published | unknown | partial
    notes: list[str] = field(default_factory=list)
    #: Why the consumer groups could not be listed (then which group applied it is unknown).
    groups_error: str | None = None

    @property
    def record(self) -> RecordView | None:
        return self.records[0] if self.records else None

    @property
    def problem(self) -> bool:
        return self.status in ("unknown", "dead-lettered", "failed", "not-published", "consumed-no-marker")

    def as_dict(self) -> dict[str, Any]:
        rec = self.record
        return {
            "event_id": self.event_id,
            "verdict": self.verdict,
            "status": self.status,
            "outbox": self.outbox,
            "kafka": {
                "topics_searched": self.topics_searched,
                "scanned": self.scanned,
                "scan_complete": self.scan_complete,
                "record": None if rec is None else {
                    "topic": rec.topic, "partition": rec.partition, "offset": rec.offset,
                    "timestamp": rec.timestamp, "key": rec.key, "event_type": rec.meta.event_type,
                    "created_at": rec.meta.created_at, "encoding": rec.encoding,
                },
                "copies": [{"topic": r.topic, "partition": r.partition, "offset": r.offset, "timestamp": r.timestamp} for r in self.records],
            },
            "groups": [g.as_dict() for g in self.groups],
            "groups_error": self.groups_error,
            "dead_letters": [d.as_dict() for d in self.dead_letters],
            "notes": self.notes,
        }


@dataclass(frozen=True)
class TraceRequest:
    """What `postbox trace` was asked (its flags, parsed), so the CLI hands over one value."""

    event_id: str
    marker_ttl: timedelta
    #: --marker-ttl as given (None: not given; then each group's published TTL is used, else ``marker_ttl``).
    marker_ttl_flag: str | None = None
    topic: str | None = None
    groups: list[str] | None = None
    database_url: str | None = None
    local_maint_url: str | None = None
    max_scan: int = DEFAULT_MAX_SCAN
    scan_redis: bool = True
    #: whose outbox table holds the row
    pipeline: Pipeline = DEFAULT


def run_trace(
    request: TraceRequest, settings: Settings,
    progress_factory: Callable[[str], Callable[[int, int | None], None]] = lambda label: (lambda done, total=None: None),
) -> Trace:
    """The whole trace: read the outbox row (with a role that may), then Kafka and Redis; the
    connections are opened and closed here, so the CLI only parses and renders."""
    url, source = reading_database_url(request.database_url, settings.database_url, request.local_maint_url)
    row = read_outbox_row(url, source, request.event_id, request.pipeline)
    state = RedisState(settings.redis_url)
    try:
        state.ping()
        with Kafka(settings.kafka_bootstrap, properties=settings.kafka_properties) as kafka:
            kafka.ping()
            return trace_event(
                request.event_id, kafka=kafka, redis_state=state, outbox=row, topic=request.topic, groups=request.groups,
                marker_ttl=request.marker_ttl, max_scan=request.max_scan, scan_redis=request.scan_redis,
                progress_factory=progress_factory, group_ttls=published_marker_ttls(state.client, request.marker_ttl_flag),
            )
    finally:
        state.close()


def trace_event(
    event_id: str,
    *,
    kafka: Kafka,
    redis_state: RedisState | None,
    outbox: dict[str, Any],
    topic: str | None = None,
    groups: list[str] | None = None,
    marker_ttl: timedelta,
    max_scan: int = DEFAULT_MAX_SCAN,
    scan_redis: bool = True,
    progress_factory: Callable[[str], Callable[[int, int | None], None]] = lambda label: (lambda done, total=None: None),
    group_ttls: Mapping[str, timedelta] | None = None,
) -> Trace:
    """``marker_ttl``: the TTL a group's markers are read with (its apply time is estimated from
    the remaining TTL), unless ``group_ttls`` has the one the group published."""
    trace = Trace(event_id, outbox)
    codec = AvroCodec()
    aggregate_type = outbox.get("aggregate_type") if outbox.get("state") == "found" else None

    # -- 2. the Kafka record -----------------------------------------------------------------------
    topics = _topics_to_search(kafka, topic, aggregate_type)
    trace.topics_searched = topics
    start_ms = _scan_start_ms(event_id, outbox)
    trace.records, trace.scanned, trace.scan_complete = _find_records(
        kafka, topics, event_id, start_ms, max_scan, progress_factory(f"searching {len(topics)} topic(s) for event {event_id}"), codec,
    )
    rec = trace.record

    # -- dead letters of the event (any group) ------------------------------------------------------
    _add_dead_letters(trace, kafka, [rec.topic] if rec else topics, start_ms, max_scan, progress_factory, codec)

    # -- 3. consumer groups ---------------------------------------------------------------------------
    if rec is not None:
        committed_by_group = _committed_by_group(trace, kafka, rec.topic)
        names = list(groups) if groups else sorted(set(committed_by_group) | {d.group for d in trace.dead_letters if d.group})
        anchors = _anchors(rec, aggregate_type)
        for name in names:
            trace.groups.append(_trace_group(
                name, rec, kafka, redis_state, committed_by_group.get(name, {}), trace.dead_letters,
                anchors, (group_ttls or {}).get(name, marker_ttl), scan_redis, progress_factory,
            ))
    elif trace.dead_letters and redis_state is not None:
        trace.notes.append("the original record was not found (retention?), but dead letters of it were")

    _verdict(trace, marker_ttl)
    return trace


def _topics_to_search(kafka: Kafka, topic: str | None, aggregate_type: str | None) -> list[str]:
    """The topics that may hold the event: the one named (it must exist), the aggregate type's, or
    every outbox topic when the type is not known; those that no longer exist are left out."""
    if topic:
        kafka.require_topic(topic)
        topics = [topic]
    elif aggregate_type:
        topics = [topic_for(aggregate_type)]
    else:
        topics = [t for t in kafka.topic_names() if t.startswith(TOPIC_PREFIX) and not t.endswith(DLQ_SUFFIX)]
    return [t for t in topics if kafka.topic_exists(t)]


def _scan_start_ms(event_id: str, outbox: dict[str, Any]) -> int | None:
    """Where the scan starts (ms): a margin before the event's creation time, read from its UUIDv7 id
    or else from its outbox row; None (the beginning) when neither tells."""
    created = uuid7_time(event_id)
    if created is None and outbox.get("created_at"):
        created = datetime.fromisoformat(outbox["created_at"].replace("Z", "+00:00"))
    return int((created - START_MARGIN).timestamp() * 1000) if created else None


def _add_dead_letters(
    trace: Trace, kafka: Kafka, origin_topics: list[str], start_ms: int | None, max_scan: int,
    progress_factory: Callable[[str], Callable[[int, int | None], None]], codec: AvroCodec,
) -> None:
    """The event's dead letters (any group) in the dead-letter topics of ``origin_topics`` that exist,
    with a note when the search was cut by --max-scan."""
    dlq_names = [t + DLQ_SUFFIX for t in origin_topics if kafka.topic_exists(t + DLQ_SUFFIX)]
    if not dlq_names:
        return
    found, scanned, complete = _find_records(
        kafka, dlq_names, trace.event_id, start_ms, max_scan, progress_factory("searching dead-letter topics"), codec, first_only=False,
    )
    trace.dead_letters = [DeadLetter(r) for r in found]
    if not complete:
        trace.notes.append(f"dead-letter search stopped after {scanned:,} records (--max-scan)")


def _committed_by_group(trace: Trace, kafka: Kafka, topic: str) -> dict[str, dict[int, int]]:
    """Each group's committed offsets on ``topic``; when the groups cannot be listed, none (the groups
    asked for by name are still traced) and the reason, kept on the trace and in its notes."""
    try:
        return kafka.groups_on_topic(topic)
    except PostboxError as exc:
        trace.groups_error = exc.message + (f" (fix: {exc.fix})" if exc.fix else "")
        trace.notes.append(f"the consumer groups could not be listed: {trace.groups_error}")
        return {}


def _anchors(rec: RecordView, aggregate_type: str | None) -> list[str]:
    """The aggregate anchor ``<type>:<key>`` a group's marker may be found under, when the record tells it."""
    agg = rec.meta.aggregate_type or aggregate_type
    return [f"{agg}:{rec.key}"] if agg and rec.key is not None else []


def _find_records(
    kafka: Kafka, topics: list[str], event_id: str, start_ms: int | None, max_scan: int,
    progress: Callable[[int, int | None], None], codec: AvroCodec, first_only: bool = True,
) -> tuple[list[RecordView], int, bool]:
    starts, ends = kafka.read_ranges(topics, since_ms=start_ms)  # a topic deleted since the listing is left out
    total = _record_count(starts, ends)
    wanted = event_id.encode()
    found: list[RecordView] = []
    hit_partition: tuple[str, int] | None = None
    hit_deadline: int | None = None
    stop_flag = [False]
    scanned = 0
    for msg in kafka.scan(starts, ends, max_records=max_scan, progress=progress, stop=lambda: stop_flag[0]):
        scanned += 1
        where = (msg.topic(), msg.partition())
        if first_only and hit_partition is not None:
            if where != hit_partition:
                continue
            if msg.timestamp()[1] > (hit_deadline or 0):
                stop_flag[0] = True
                continue
        if not _carries_id(msg, wanted):
            continue
        found.append(render(msg, codec))
        if first_only and hit_partition is None:
            hit_partition = where
            hit_deadline = msg.timestamp()[1] + DUPLICATE_WINDOW_MS
    complete = stop_flag[0] or scanned >= total or (first_only and bool(found))
    return found, scanned, complete


def _record_count(starts: Mapping[Any, int], ends: Mapping[Any, int]) -> int:
    """How many records a scan from ``starts`` to ``ends`` (per topic partition) reads at most."""
    return sum(max(0, ends[tp] - starts[tp]) for tp in starts)


def _carries_id(msg: Any, wanted: bytes) -> bool:
    """True when the record's ``id`` header is the event id (bare or JSON-quoted)."""
    headers = msg.headers() or []
    return any(k == "id" and v is not None and (v == wanted or v.strip(b'"') == wanted) for k, v in headers)


def _trace_group(
    group: str, rec: RecordView, kafka: Kafka, redis_state: RedisState | None, committed: dict[int, int],
    dead_letters: list[DeadLetter], anchors: list[str], marker_ttl: timedelta, scan_redis: bool,
    progress_factory: Callable[[str], Callable[[int, int | None], None]],
) -> GroupTrace:
    g = GroupTrace(group)
    _place_group(g, rec, kafka, committed)
    mine = [d for d in dead_letters if d.group in (group, None)]
    g.dead_letters = [
        {"ref": d.ref, "error": d.error, "error_class": d.error_class, "failed_at": iso(d.failed_at), "attempts": d.attempts}
        for d in mine
    ]
    marker = None
    if redis_state is not None:
        marker = _find_marker(g, rec, redis_state, anchors, scan_redis=scan_redis and g.consumed and not mine, progress_factory=progress_factory)
        g.failures = [f.as_dict() for f in redis_state.failures(group, rec.meta.event_id or "", anchors)]
    verdict = marker.verdict if marker is not None else None
    applied = marker.applied_at(marker_ttl) if marker is not None else None
    if marker is not None:
        g.marker = _marker_fields(marker, verdict, applied)
    scan_note = g.summary  # set by a SCAN cut short: the status line keeps it
    g.status, g.summary = _group_status(g, rec, marker, verdict, applied, mine, marker_ttl)
    if scan_note:
        g.summary = f"{g.summary} {scan_note}"
    return g


def _place_group(g: GroupTrace, rec: RecordView, kafka: Kafka, committed: dict[int, int]) -> None:
    """Where the group stands against the record: its state and members, its committed offset on the
    record's partition, and whether that is past the record (else how far behind it is)."""
    info = kafka.describe_group(g.group)
    g.state, g.members = info.state, len(info.members)
    g.committed = committed.get(rec.partition)
    g.end = kafka.watermarks(rec.topic, [rec.partition])[rec.partition][1]
    g.consumed = g.committed is not None and g.committed > rec.offset
    if not g.consumed:
        g.behind = rec.offset - (g.committed if g.committed is not None else kafka.watermarks(rec.topic, [rec.partition])[rec.partition][0]) + 1


def _find_marker(
    g: GroupTrace, rec: RecordView, redis_state: RedisState, anchors: list[str], *, scan_redis: bool,
    progress_factory: Callable[[str], Callable[[int, int | None], None]],
) -> Marker | None:
    """The group's marker of the event, under its anchors or its id; ``scan_redis``: else by SCAN
    (only for a consumed record that no dead letter explains), noted on ``g`` when cut short."""
    marker = redis_state.find_marker(g.group, rec.meta.event_id or "", anchors)
    if marker is None and scan_redis:
        marker, scanned, complete = redis_state.scan_marker(
            g.group, rec.meta.event_id or "", progress=progress_factory(f"SCAN for the marker of group {g.group}"),
        )
        if not complete and marker is None:
            g.summary = f"(marker SCAN stopped after {scanned:,} keys)"
    return marker


def _group_status(
    g: GroupTrace, rec: RecordView, marker: Marker | None, verdict: Verdict | None, applied: datetime | None,
    mine: list[DeadLetter], marker_ttl: timedelta,
) -> tuple[str, str]:
    """The group's status and summary line, from the strongest evidence down: a failure verdict in
    its marker, the marker, its dead letters, its failure stream, its committed offset."""
    group = g.group
    if verdict is not None and not mine:
        owed = "acknowledged" if verdict.delivered else "owed (written when the group reads the record again)"
        return "failed", f"failed in {group}: {verdict.error_class}: {verdict.error} (its verdict is in its marker; dead letter {owed})"
    if marker is not None and verdict is None:
        when = f" at ~{iso(applied)}" if applied else ""
        return "applied", f"applied by {group}{when}" + (" (after being dead-lettered; replayed)" if mine else "")
    if mine:
        last = mine[-1]
        return "dead-lettered", f"dead-lettered by {group}: {last.error_class or 'error'}: {last.error or '?'}"
    if g.failures:
        failure = g.failures[-1]
        return "failed", f"failed in {group} at {failure.get('at')}: {failure.get('error')} (in its failure stream, not in the DLQ)"
    if g.consumed:
        return "consumed-no-marker", _no_marker_summary(g, rec, marker_ttl)
    stopped = "" if g.members else " (no members: its consumers are stopped)"
    return "waiting", f"waiting: group {group} is {g.behind:,} behind on partition {rec.partition}{stopped}"


def _no_marker_summary(g: GroupTrace, rec: RecordView, marker_ttl: timedelta) -> str:
    """Why a group that committed past the record has no marker of it: expired, or not where it was looked for."""
    age = datetime.now(timezone.utc) - datetime.fromtimestamp((rec.timestamp_ms or 0) / 1000, tz=timezone.utc)
    why = (
        f"the marker expired (the event is {human_duration(age)} old, markers live {human_duration(marker_ttl)})"
        if age > marker_ttl else "no marker under the aggregate anchor, the event id or a SCAN: a different namespace or Redis?"
    )
    return f"consumed by {g.group} (committed {g.committed:,} > offset {rec.offset:,}) but {why}"


def _marker_fields(marker: Marker, verdict: Verdict | None, applied: datetime | None) -> dict[str, Any]:
    """What ``trace --json`` shows of a group's marker: an applied event's (with its estimated
    apply time) or a failure verdict's (postbox.effects.verdicts)."""
    return {
        "key": marker.key, "found_by": marker.found_by, "ttl_ms": marker.ttl_ms,
        "applied_at_estimate": None if verdict else iso(applied), "expires_at": iso(marker.expires_at()),
        "verdict": None if verdict is None else {
            "dead_letter": "acknowledged" if verdict.delivered else "owed", "error_class": verdict.error_class, "error": verdict.error,
        },
    }  # fmt: skip


def _verdict(trace: Trace, marker_ttl: timedelta) -> None:
    rec = trace.record
    if rec is None:
        trace.status, trace.verdict = _verdict_without_record(trace)
        return
    place = f"{rec.topic}[{rec.partition}]@{rec.offset}"
    if trace.groups_error is not None and not trace.groups:
        trace.status = "unknown"
        trace.verdict = f"published to {place} at {iso_ms(rec.timestamp_ms)}; applied by: unknown, the consumer groups could not be listed: {trace.groups_error}"
        return
    if not trace.groups:
        trace.status = "published"
        trace.verdict = f"published to {place} at {iso_ms(rec.timestamp_ms)}; no consumer group has committed offsets on {rec.topic}"
        return
    trace.status, trace.verdict = _verdict_of_groups(trace.groups)


def _verdict_of_groups(groups: list[GroupTrace]) -> tuple[str, str]:
    """The worst group's status, and every group's summary, worst first; when every one of several
    groups applied it, which applied it when."""
    order = ["dead-lettered", "failed", "consumed-no-marker", "waiting", "applied"]
    worst = min((g.status for g in groups), key=lambda s: order.index(s) if s in order else 0)
    status = worst if worst != "consumed-no-marker" else "consumed-no-marker"
    parts = [g.summary for g in sorted(groups, key=lambda g: order.index(g.status) if g.status in order else 0)]
    verdict = "; ".join(parts)
    if worst == "applied" and len(groups) > 1:
        verdict = "applied by " + ", ".join(
            f"{g.group} at ~{g.marker['applied_at_estimate']}" if g.marker and g.marker.get("applied_at_estimate") else g.group
            for g in groups
        )
    return status, verdict


def _verdict_without_record(trace: Trace) -> tuple[str, str]:
    """Status and verdict when no copy of the event was found in Kafka: dead-lettered (the original
    gone), still in the outbox (not published), or nowhere that was searched."""
    row = trace.outbox
    if trace.dead_letters:
        d = trace.dead_letters[-1]
        return "dead-lettered", f"dead-lettered by {d.group or '?'}: {d.error_class or 'error'}: {d.error or '?'} (original record no longer in {d.origin_topic})"
    scan = "" if trace.scan_complete else f" (scan stopped after {trace.scanned:,} records: raise --max-scan)"
    if row.get("state") == "found":
        return "not-published", (
            f"not published yet: in the outbox since {row.get('created_at')} but not on "
            f"{', '.join(trace.topics_searched) or topic_for(str(row.get('aggregate_type')))}{scan}: check the connector and slot (`postbox lag`)"
        )
    where = "in the outbox" if row.get("state") == "absent" else "in Kafka"
    verdict = (
        f"unknown: event {trace.event_id} is not {where}"
        f"{' or in Kafka' if where == 'in the outbox' else ''} ({len(trace.topics_searched)} topic(s), {trace.scanned:,} records searched){scan}"
    )
    if row.get("state") == "unreadable":
        verdict += "; the outbox row could not be read with this role"
    return "unknown", verdict


__all__ = ["Trace", "parse_event_id", "read_outbox_row", "reading_database_url", "trace_event", "IncidentError"]
