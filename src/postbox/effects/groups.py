"""The consumer-group registry: what each group told Redis about itself when it started.

Why: the dedupe marker's TTL is the one number that bounds "exactly once" in time. A record that
comes back after its marker expired is applied again, so `postbox doctor` must compare each group's
marker TTL with how long Kafka can redeliver (topic retention + segment roll, group offsets
retention). Only the consumer knows its TTL; it publishes it here at start-up, and every reader
(doctor, trace, dlq replay) reads it instead of trusting a flag.

Layout: one hash ``<namespace>:groups``; field = group name, value = JSON
``{"marker_ttl_ms": int, "namespace": str, "updated_at": ISO-8601 UTC}``. A single key (not part of
any atomic apply), so on Redis Cluster it simply lives on one node.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

DEFAULT_NAMESPACE = "postbox"


def registry_key(namespace: str = DEFAULT_NAMESPACE) -> bytes:
    """The hash holding every group's published settings."""
    return f"{namespace}:groups".encode("utf-8")


@dataclass(frozen=True)
class GroupInfo:
    """One consumer group's published settings."""

    group: str
    marker_ttl: timedelta
    updated_at: datetime | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "marker_ttl_ms": round(self.marker_ttl / timedelta(milliseconds=1)),
            "updated_at": self.updated_at.isoformat() if self.updated_at else None,
        }


def publish(client: Any, group: str, marker_ttl: timedelta, *, namespace: str = DEFAULT_NAMESPACE) -> None:
    """Record ``group``'s marker TTL (called by the engine when it loads its script)."""
    value = json.dumps(
        {
            "marker_ttl_ms": round(marker_ttl / timedelta(milliseconds=1)),
            "namespace": namespace,
            "updated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
    )
    client.hset(registry_key(namespace), group.encode("utf-8"), value.encode("utf-8"))


def unpublish(client: Any, *groups: str, namespace: str = DEFAULT_NAMESPACE) -> int:
    """Remove groups that will never consume again (single-use groups, e.g. the demo's), so
    `postbox doctor` stops holding their marker TTL against the topics. Returns how many were there."""
    if not groups:
        return 0
    return int(client.hdel(registry_key(namespace), *(g.encode("utf-8") for g in groups)))


def read(client: Any, *, namespace: str = DEFAULT_NAMESPACE) -> dict[str, GroupInfo]:
    """Every published group; entries that do not parse are skipped (a reader must not crash)."""
    raw = client.hgetall(registry_key(namespace)) or {}
    groups: dict[str, GroupInfo] = {}
    for field_name, value in raw.items():
        group = field_name.decode("utf-8", "replace") if isinstance(field_name, bytes) else str(field_name)
        info = _parse(group, value)
        if info is not None:
            groups[group] = info
    return groups


def _parse(group: str, value: Any) -> GroupInfo | None:
    try:
        data = json.loads(value)
        ttl = timedelta(milliseconds=int(data["marker_ttl_ms"]))
        updated = data.get("updated_at")
        return GroupInfo(group, ttl, datetime.fromisoformat(updated) if updated else None)
    except (ValueError, TypeError, KeyError):
        return None


__all__ = ["GroupInfo", "publish", "read", "registry_key", "unpublish"]
