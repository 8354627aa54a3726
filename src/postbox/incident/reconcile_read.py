"""What each hop still holds for a reconcile window, read in bulk (the comparison is in
:mod:`postbox.incident.reconcile`).

- **outbox**: one range query on the primary key (``sql/reconcile_rows.sql``: UUIDv7 ids are
  times, so the window's ids are one index range per partition it overlaps), with a role that may
  read the table (``trace``'s rule: --database-url, POSTBOX_ADMIN_DATABASE_URL,
  POSTBOX_MAINT_DATABASE_URL, the local stack's postbox_maint); the oldest retained row says where
  retention has cut the window.
- **Kafka**: the outbox topics read from ``offsets_for_times(since - margin)`` to
  ``offsets_for_times(until + margin)``: only the window's part of the log. Only the headers are
  looked at (the event id, its creation time), never the payload.
- **dead letters**: ``<topic>.dlq`` from the window's start to its end of log (a dead letter is
  written after its record), the event ids per group.
- **Redis**: every record's marker under its aggregate's tag and under the legacy event-id tag,
  ``GET`` in pipelines of a few thousand keys (on a cluster the client routes each key to its slot);
  the events of a group still without a marker then by one SCAN of the group's marker pattern
  (a handler's own routing key, or a legacy marker under its first effect key's tag, puts the
  marker under a tag no Kafka record tells).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from postbox.consumer.dlq_record import H_GROUP
from postbox.effects.keys import KeyLayout, escape_group, glob_escape
from postbox.incident.reconcile import Copy, OutboxState, Row
from postbox.incident.records import parse_iso, uuid7_time
from postbox.incident.redis_state import NAMESPACE
from postbox.kafka_cluster import Kafka
from postbox.pipelines import Pipeline

#: How far before the window the Kafka read starts (clock skew between writers and Kafka).
EARLY_MARGIN = timedelta(minutes=5)
#: How far after the window's end records of its events are still looked for (connector lag).
LATE_MARGIN = timedelta(minutes=15)
#: Keys per Redis pipeline round trip.
REDIS_BATCH = 5000

Progress = Callable[[int, "int | None"], None]


def _sql(name: str, pipeline: Pipeline) -> str:
    text = (Path(__file__).parent / "sql" / name).read_text(encoding="utf-8")
    return pipeline.sql(" ".join(line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("--")))


def uuid7_floor(when: datetime) -> str:
    """The smallest UUIDv7 of ``when``'s millisecond: every id made at or after it sorts >= it."""
    ms = int(when.timestamp() * 1000)
    hexed = f"{ms:012x}" + "0" * 20
    return f"{hexed[:8]}-{hexed[8:12]}-{hexed[12:16]}-{hexed[16:20]}-{hexed[20:]}"


def read_outbox(url: str, source: str, since: datetime, until: datetime, aggregate_type: str | None, pipeline: Pipeline) -> OutboxState:
    """The window's rows and the oldest retained row; rows None (with the reason) when this role
    may not read the table or the database did not answer."""
    import psycopg

    params = {"low": uuid7_floor(since), "high": uuid7_floor(until), "aggregate_type": aggregate_type}
    try:
        with psycopg.connect(url, connect_timeout=5, autocommit=True) as conn:
            try:
                return _read_rows(conn, params, pipeline)
            except psycopg.errors.InsufficientPrivilege:
                try:  # postbox_maint is NOINHERIT: it reads only as postbox_owner
                    conn.execute("SET ROLE postbox_owner")
                    return _read_rows(conn, params, pipeline)
                except psycopg.Error:
                    return OutboxState(None, reason=f"role {conn.info.user!r} ({source}) may not read {pipeline.table}: "
                                       "pass --database-url with postbox_maint or an admin")  # fmt: skip
    except psycopg.Error as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return OutboxState(None, reason=f"{source}: {first}")


def _read_rows(conn: Any, params: dict[str, Any], pipeline: Pipeline) -> OutboxState:
    rows = [Row(eid, agg, aid, created) for eid, agg, aid, created in conn.execute(_sql("reconcile_rows.sql", pipeline), params)]
    oldest = conn.execute(_sql("reconcile_oldest.sql", pipeline)).fetchone()
    oldest_at = None if oldest is None else (uuid7_time(oldest[0]) or oldest[1])
    return OutboxState(rows, oldest_retained=oldest_at)


def _header(headers: Any, name: str) -> str | None:
    """A header's text (the router may quote a JSON string id); None when absent."""
    for key, value in headers:
        if key == name and value is not None:
            text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
            return text.strip('"')
    return None


def read_copies(kafka: Kafka, topics: list[str], since: datetime, until: datetime, *, max_scan: int,
                progress: Progress | None = None) -> tuple[list[Copy], int, bool]:  # fmt: skip
    """(records carrying an event id, records read, complete) of ``topics`` around the window."""
    starts, ends = kafka.read_ranges(topics, since_ms=_ms(since - EARLY_MARGIN), until_ms=_ms(until + LATE_MARGIN))
    total = sum(max(0, ends[tp] - starts[tp]) for tp in starts)
    copies: list[Copy] = []
    scanned = 0
    for msg in kafka.scan(starts, ends, max_records=max_scan, progress=progress):
        scanned += 1
        copy = _copy(msg)
        if copy is not None:
            copies.append(copy)
    return copies, scanned, scanned >= total


def _copy(msg: Any) -> Copy | None:
    headers = msg.headers() or []
    eid = _header(headers, "id")
    if not eid:
        return None
    stamp = msg.timestamp()[1]
    created = uuid7_time(eid) or parse_iso(_header(headers, "created_at")) or datetime.fromtimestamp(stamp / 1000, tz=timezone.utc)
    key = msg.key()
    return Copy(eid, msg.topic(), msg.partition(), msg.offset(), stamp, created,
                key.decode("utf-8", "replace") if key is not None else None, _header(headers, "aggregate_type"))  # fmt: skip


def read_dead_letters(kafka: Kafka, topics: list[str], since: datetime, *, max_scan: int,
                      progress: Progress | None = None) -> tuple[dict[str | None, set[str]], bool]:  # fmt: skip
    """{group (None: not named): event ids} in ``<topic>.dlq`` from the window's start on."""
    from postbox.topics import DLQ_SUFFIX

    names = [t + DLQ_SUFFIX for t in topics if kafka.topic_exists(t + DLQ_SUFFIX)]
    starts, ends = kafka.read_ranges(names, since_ms=_ms(since - EARLY_MARGIN))
    total = sum(max(0, ends[tp] - starts[tp]) for tp in starts)
    out: dict[str | None, set[str]] = {}
    scanned = 0
    for msg in kafka.scan(starts, ends, max_records=max_scan, progress=progress):
        scanned += 1
        headers = msg.headers() or []
        eid = _header(headers, "id")
        if eid:
            out.setdefault(_header(headers, H_GROUP), set()).add(eid)
    return out, scanned >= total


def marker_keys(group: str, copy: Copy, namespace: str = NAMESPACE) -> list[bytes]:
    """The keys the group's marker of ``copy`` may have: under its aggregate's tag, and under the
    legacy layout's event-id tag (markers written before the marker identity change)."""
    layout = KeyLayout(namespace, group, slot_aligned=False)
    eid = copy.event_id.encode()
    keys = []
    if copy.aggregate_type and copy.key is not None:
        keys.append(layout.marker(eid, f"{copy.aggregate_type}:{copy.key}".encode()))
    if "}" not in copy.event_id:
        keys.append(layout.legacy_marker(eid, eid))
    return keys


def read_markers(client: Any, group: str, copies: Iterable[Copy], *, namespace: str = NAMESPACE,
                 progress: Progress | None = None) -> dict[str, bytes]:  # fmt: skip
    """{event id: marker value} of the group's markers found (pipelined GETs, one key set per event)."""
    wanted = [(c.event_id, key) for c in dict((c.event_id, c) for c in copies).values() for key in marker_keys(group, c, namespace)]
    found: dict[str, bytes] = {}
    for start in range(0, len(wanted), REDIS_BATCH):
        chunk = wanted[start:start + REDIS_BATCH]
        pipe = client.pipeline(transaction=False)
        for _, key in chunk:
            pipe.get(key)
        for (eid, _), value in zip(chunk, pipe.execute()):
            if value is not None:
                found.setdefault(eid, value)
        if progress is not None:
            progress(min(start + REDIS_BATCH, len(wanted)), len(wanted))
    return found


def scan_markers(client: Any, group: str, event_ids: Iterable[str], *, namespace: str = NAMESPACE, max_keys: int,
                 progress: Progress | None = None) -> tuple[dict[str, bytes], bool]:  # fmt: skip
    """({event id: marker value}, searched) for markers the direct GETs missed: those of a handler
    that declares its own routing key (its tag is the routing key's, which no Kafka record
    carries) or legacy markers under the first effect key's tag. One SCAN over the group's marker
    pattern (both spellings of the group), then pipelined GETs of the keys of wanted events.
    Not searched (False) when the Redis holds more than ``max_keys`` keys."""
    wanted = set(event_ids)
    if not wanted:
        return {}, True
    layout = KeyLayout(namespace, group, slot_aligned=False)
    heads = list(dict.fromkeys([escape_group(layout.group) + b":", layout.group + b":"]))
    total = int(client.dbsize())
    if total > max_keys:
        return {}, False
    keys: dict[bytes, str] = {}
    ns = glob_escape(namespace.encode())
    for n, head in enumerate(heads):
        for key in client.scan_iter(match=b"%s:{*}:seen:%s*" % (ns, glob_escape(head)), count=10_000):
            eid = _marker_event_id(key, head)
            if eid in wanted:
                keys.setdefault(key, eid)
        if progress is not None:
            progress(n + 1, len(heads))
    found: dict[str, bytes] = {}
    listed = list(keys.items())
    for start in range(0, len(listed), REDIS_BATCH):
        chunk = listed[start:start + REDIS_BATCH]
        pipe = client.pipeline(transaction=False)
        for key, _ in chunk:
            pipe.get(key)
        for (_, eid), value in zip(chunk, pipe.execute()):
            if value is not None:
                found.setdefault(eid, value)
    return found, True


def _marker_event_id(key: bytes, head: bytes) -> str | None:
    """The event id of marker ``key`` when its group part is ``head`` (``<group>:``), else None:
    a tag holds no ``}``, so the first ``}:seen:`` ends it."""
    _, sep, rest = key.partition(b"}:seen:")
    if not sep or not rest.startswith(head):
        return None
    return rest[len(head):].decode("utf-8", "replace")


def eviction(client: Any, since: datetime | None = None, now: datetime | None = None) -> str | None:
    """Why absent markers may have been evicted (None: no key was evicted, or INFO is not allowed,
    which says nothing either way).

    ``evicted_keys`` counts since the server's start whatever the policy is *now*: an operator who
    set ``noeviction`` back after the incident does not bring the evicted markers back, so any
    eviction counts. With none counted, a policy that can evict still counts when the server
    started after ``since`` (the counter does not cover the window). A cluster: summed over the
    nodes that answer."""
    try:
        nodes = _per_node(client.info("memory")), _per_node(client.info("stats")), _per_node(client.info("server"))
    except Exception:  # an ACL that refuses INFO: the TTL rule still holds
        return None
    memory, stats, server = nodes
    evicted = sum(int(s.get("evicted_keys", 0) or 0) for s in stats)
    policies = sorted({str(m.get("maxmemory_policy", "noeviction")) for m in memory})
    policy = ", ".join(policies) or "noeviction"
    if evicted:
        return f"Redis evicted {evicted:,} key(s) since its start (maxmemory-policy {policy} now); the marker may be one of them"
    uptimes = [int(s.get("uptime_in_seconds", 0) or 0) for s in server]
    if since is None or not uptimes or policies == ["noeviction"]:
        return None
    started = (now or datetime.now(timezone.utc)) - timedelta(seconds=min(uptimes))
    if started <= since - EARLY_MARGIN:
        return None
    return (f"Redis can evict keys (maxmemory-policy {policy}) and started at {started.isoformat(timespec='seconds')}, "
            "after the window began: evictions before its start are not counted")


def _per_node(reply: Any) -> list[dict[str, Any]]:
    """INFO's reply as one dict per server (a cluster client answers {node: {...}})."""
    if isinstance(reply, dict) and len(reply) and all(isinstance(v, dict) for v in reply.values()):
        return list(reply.values())
    return [reply] if isinstance(reply, dict) else []


def _ms(when: datetime) -> int:
    return int(when.timestamp() * 1000)


__all__ = ["read_copies", "read_dead_letters", "read_markers", "read_outbox", "eviction", "marker_keys", "scan_markers", "uuid7_floor"]
