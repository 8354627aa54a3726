"""What Redis knows about an event for a consumer group: its dedupe marker and its failure records.

The marker ``postbox:{<routing tag>}:seen:<group, escaped>:<event id>`` exists once the group
applied the event (it is written in the same script as the effects) and expires after the group's
marker TTL; the layout is :class:`postbox.effects.keys.KeyLayout`'s. The routing tag is the event's
aggregate, ``<aggregate_type>:<aggregate_id>``, unless the handler declares a routing key; markers
under other tags are found with a bounded ``SCAN MATCH postbox:*:seen:<group>:<event id>``. Markers
written before the marker identity change (legacy layout: the tag of the event's first effect key,
or the event id; the group unescaped) are looked up too.

The marker's value carries no time, but its remaining TTL does: applied ≈ now − (TTL − PTTL).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import redis

from postbox.effects.engine import DEFAULT_MARKER_TTL
from postbox.effects.keys import KeyLayout, glob_escape
from postbox.effects.verdicts import Verdict, is_verdict, parse_verdict
from postbox.durations import parse_duration
from postbox.errors import ConfigError, IncidentError
from postbox.redis_client import connect
from postbox.settings import redact_url

NAMESPACE = "postbox"
MARKER_TTL_ENV = "POSTBOX_MARKER_TTL"
DEFAULT_SCAN_KEYS = 2_000_000
FAILURE_SCAN_ENTRIES = 20_000

def marker_ttl(flag: str | None = None) -> timedelta:
    """The dedupe marker TTL the consumer groups use: --marker-ttl, else POSTBOX_MARKER_TTL, else 8d."""
    raw = flag or os.environ.get(MARKER_TTL_ENV)
    if not raw:
        return DEFAULT_MARKER_TTL
    try:
        return parse_duration(raw, "marker TTL")
    except ValueError as exc:
        raise ConfigError(f"{MARKER_TTL_ENV if not flag else '--marker-ttl'}: {exc}", fix="e.g. 8d (the engine's default)") from None


def published_marker_ttl(redis_url: str, group: str) -> timedelta | None:
    """The marker TTL ``group`` published at its last start (:mod:`postbox.effects.groups`), or
    None: never published, or Redis did not answer (the caller's own Redis work says why)."""
    from postbox.effects import groups

    client = connect(redis_url, socket_timeout=5, socket_connect_timeout=5)
    try:
        found = groups.read(client).get(group)
    except redis.RedisError:
        return None
    finally:
        client.close()
    return found.marker_ttl if found is not None else None


def group_marker_ttl(flag: str | None, group: str, redis_url: str) -> timedelta:
    """The marker TTL of ``group``: --marker-ttl, else POSTBOX_MARKER_TTL, else the TTL the group
    published (what its markers really live, as doctor reads it), else the engine's default."""
    if flag or os.environ.get(MARKER_TTL_ENV):
        return marker_ttl(flag)
    return published_marker_ttl(redis_url, group) or DEFAULT_MARKER_TTL


def published_marker_ttls(client: Any, flag: str | None) -> dict[str, timedelta] | None:
    """Every group's published marker TTL, for checks that reach several groups at once (a
    replayed dead letter reaches every group reading its topic); None when --marker-ttl or
    POSTBOX_MARKER_TTL fixes the TTL (the operator's word wins) or Redis did not answer (the
    caller's own Redis work says why)."""
    from postbox.effects import groups

    if flag or os.environ.get(MARKER_TTL_ENV):
        return None
    try:
        return {name: info.marker_ttl for name, info in groups.read(client).items()}
    except redis.RedisError:
        return None


def human_duration(delta: timedelta | float | None) -> str:
    if delta is None:
        return "?"
    seconds = delta.total_seconds() if isinstance(delta, timedelta) else float(delta)
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 1:
        return f"{sign}{seconds * 1000:.0f} ms"
    if seconds < 90:
        return f"{sign}{seconds:.0f} s"
    if seconds < 5400:
        return f"{sign}{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{sign}{seconds / 3600:.1f} h"
    return f"{sign}{seconds / 86400:.1f} d"


def iso(dt: datetime | None) -> str | None:
    if dt is None:
        return None
    return dt.astimezone(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass
class Marker:
    key: str
    ttl_ms: int | None  # remaining; None when the key has no TTL
    found_by: str  # "aggregate" | "legacy-aggregate" | "legacy-event-id" | "scan"
    #: The marker's value: ``1`` (applied) or the group's failure verdict (postbox.effects.verdicts).
    value: bytes | None = None

    @property
    def verdict(self) -> Verdict | None:
        """The failure verdict the marker holds, or None when it says the event applied."""
        return parse_verdict(self.value) if self.value is not None and is_verdict(self.value) else None

    def applied_at(self, ttl: timedelta, now: datetime | None = None) -> datetime | None:
        if self.ttl_ms is None:
            return None
        now = now or datetime.now(timezone.utc)
        return now - (ttl - timedelta(milliseconds=self.ttl_ms))

    def expires_at(self, now: datetime | None = None) -> datetime | None:
        if self.ttl_ms is None:
            return None
        return (now or datetime.now(timezone.utc)) + timedelta(milliseconds=self.ttl_ms)


@dataclass
class FailureRecord:
    stream: str
    entry_id: str
    at: datetime
    fields: dict[str, str]

    @property
    def error(self) -> str:
        return self.fields.get("error", "")

    def as_dict(self) -> dict[str, Any]:
        return {"stream": self.stream, "entry_id": self.entry_id, "at": iso(self.at), **self.fields}


class RedisState:
    """Read-only lookups of markers and failure streams (no writes, bounded scans)."""

    def __init__(self, url: str, namespace: str = NAMESPACE) -> None:
        self.url = url
        self.namespace = namespace
        self.client = connect(url, socket_connect_timeout=3, socket_timeout=10)

    def close(self) -> None:
        self.client.close()

    def ping(self) -> None:
        try:
            self.client.ping()
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise IncidentError(
                f"Redis at {redact_url(self.url)} is unreachable ({exc})",
                fix="start it with `postbox up`, or point POSTBOX_REDIS_URL / --redis-url at your Redis",
            ) from None

    def _layout(self, group: str) -> KeyLayout:
        return KeyLayout(self.namespace, group, slot_aligned=False)

    def candidate_markers(self, group: str, event_id: str, anchors: list[str]) -> list[tuple[str, str]]:
        layout = self._layout(group)
        eid = event_id.encode()
        out = [("aggregate", layout.marker(eid, a.encode()).decode()) for a in anchors]
        for label, anchor in [("legacy-aggregate", a) for a in anchors] + [("legacy-event-id", event_id)]:
            if anchor and "}" not in anchor:
                out.append((label, layout.legacy_marker(eid, anchor.encode()).decode()))
        first: dict[str, str] = {}
        for label, key in out:
            first.setdefault(key, label)  # the current layout's label wins when both give one key
        return [(label, key) for key, label in first.items()]

    def find_marker(self, group: str, event_id: str, anchors: list[str]) -> Marker | None:
        """The group's marker for the event under the anchor-derived keys (see :meth:`scan_marker`)."""
        candidates = self.candidate_markers(group, event_id, anchors)
        try:
            pipe = self.client.pipeline(transaction=False)
            for _, key in candidates:
                pipe.pttl(key)
                pipe.get(key)
            replies = pipe.execute()
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise IncidentError(f"Redis at {redact_url(self.url)} is unreachable ({exc})", fix="check POSTBOX_REDIS_URL / --redis-url") from None
        for (label, key), pttl, value in zip(candidates, replies[::2], replies[1::2]):
            if pttl != -2:
                return Marker(key, pttl if pttl >= 0 else None, label, value)
        return None

    def scan_marker(
        self, group: str, event_id: str, *, max_keys: int = DEFAULT_SCAN_KEYS,
        progress: Callable[[int, int | None], None] | None = None,
    ) -> tuple[Marker | None, int, bool]:
        """Bounded SCAN for the marker under any tag: (marker, keys scanned, complete). A group
        whose escaped name differs (it holds ``:`` or ``%``) is scanned for the legacy name too."""
        eid = event_id.encode()
        patterns = dict.fromkeys([
            self._layout(group).marker_pattern(eid),
            b"%s:*:seen:%s:%s" % (self.namespace.encode(), glob_escape(group.encode()), glob_escape(eid)),
        ])
        try:
            total = int(self.client.dbsize())
            scanned = 0
            for pattern in patterns:
                found, scanned, complete = self._scan(pattern, scanned, max_keys, total, progress)
                if found is not None or not complete:
                    return found, scanned, complete
            return None, total, True
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise IncidentError(f"Redis at {redact_url(self.url)} is unreachable ({exc})", fix="check POSTBOX_REDIS_URL / --redis-url") from None

    def _scan(
        self, pattern: bytes, scanned: int, max_keys: int, total: int, progress: Callable[[int, int | None], None] | None,
    ) -> tuple[Marker | None, int, bool]:
        cursor = 0
        while True:
            cursor, keys = self.client.scan(cursor=cursor, match=pattern, count=10_000)
            scanned += 10_000
            for key in keys:
                pttl, value = self.client.pttl(key), self.client.get(key)
                if pttl != -2:
                    return Marker(key.decode("utf-8", "backslashreplace"), pttl if pttl >= 0 else None, "scan", value), min(scanned, total), True
            if progress is not None:
                progress(min(scanned, total), total)
            if cursor == 0:
                return None, scanned, True
            if scanned >= max_keys:
                return None, scanned, False

    def failures(self, group: str, event_id: str, anchors: list[str], max_entries: int = FAILURE_SCAN_ENTRIES) -> list[FailureRecord]:
        """Failure-stream records of the event for the group (single-server and slot-aligned streams)."""
        single = self._layout(group).failures(b"")
        aligned = KeyLayout(self.namespace, group, slot_aligned=True)
        streams = [single] + [aligned.failures(a.encode()) for a in [*anchors, event_id] if a and "}" not in a]
        out: list[FailureRecord] = []
        wanted = event_id.encode()
        try:
            for stream in dict.fromkeys(streams):
                if self.client.type(stream) != b"stream":
                    continue
                out += self._stream_failures(stream, wanted, max_entries)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise IncidentError(f"Redis at {redact_url(self.url)} is unreachable ({exc})", fix="check POSTBOX_REDIS_URL / --redis-url") from None
        return sorted(out, key=lambda f: f.entry_id)

    def _stream_failures(self, stream: bytes, wanted: bytes, max_entries: int) -> list[FailureRecord]:
        """One failure stream's records of the event, newest first, reading at most about ``max_entries``."""
        out: list[FailureRecord] = []
        end, read = b"+", 0
        while read < max_entries:
            entries = self.client.xrevrange(stream, max=end, min=b"-", count=1000)
            if not entries:
                break
            out += [_failure_record(stream, entry_id, fields) for entry_id, fields in entries
                    if fields.get(b"event") == wanted or fields.get(b"event_id") == wanted]
            read += len(entries)
            last = entries[-1][0]
            ms, seq = (int(x) for x in last.split(b"-"))
            if ms == 0 and seq == 0:
                break
            end = f"{ms}-{seq - 1}".encode() if seq > 0 else f"{ms - 1}-18446744073709551615".encode()
            if len(entries) < 1000:
                break
        return out


def _failure_record(stream: bytes, entry_id: bytes, fields: dict[bytes, bytes]) -> FailureRecord:
    """A failure-stream entry as a record: its time is the entry id's milliseconds."""
    ms = int(entry_id.split(b"-")[0])
    return FailureRecord(
        stream.decode(), entry_id.decode(),
        datetime.fromtimestamp(ms / 1000, tz=timezone.utc),
        {k.decode(): v.decode("utf-8", "backslashreplace") for k, v in fields.items()},
    )
