"""`postbox lag`: how far behind each consumer group is, and whether events reach Kafka at all.

Per group and partition: committed offset, end offset, lag (end − committed; end − earliest when
the group never committed there) and the age of the oldest unconsumed event (the timestamp of the
record at the committed offset). Next to it, the other end of the pipeline: the Debezium
replication slot's lag in WAL bytes, and the connector's and tasks' state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from postbox.errors import UnknownTopicError
from postbox.kafka_cluster import GroupInfo, GroupMember, Kafka
from postbox.topics import TOPIC_PREFIX
from postbox.incident.records import iso_ms

MAX_AGE_LOOKUPS = 500


@dataclass
class PartitionLag:
    topic: str
    partition: int
    committed: int | None
    end: int
    earliest: int
    lag: int
    oldest_unconsumed_ms: int | None = None
    #: The broker leading the partition (None: no leader now) and its replicas / in-sync replicas:
    #: lag that grows behind a dead leader, or a partition one failure from refusing writes, shows here.
    leader: int | None = None
    replicas: tuple[int, ...] = ()
    isrs: tuple[int, ...] = ()

    def as_dict(self, now_ms: int) -> dict[str, Any]:
        age = (now_ms - self.oldest_unconsumed_ms) / 1000 if self.oldest_unconsumed_ms else None
        return {
            "topic": self.topic, "partition": self.partition, "committed": self.committed,
            "end": self.end, "lag": self.lag,
            "oldest_unconsumed_at": iso_ms(self.oldest_unconsumed_ms),
            "oldest_unconsumed_age_seconds": round(age, 3) if age is not None else None,
            "leader": self.leader, "replicas": list(self.replicas), "isr": list(self.isrs),
        }

    def nodes(self) -> str:
        """``leader 2``, ``leader 2, in sync 2,3 of 1,2,3`` when a replica is behind, ``no leader``."""
        if self.leader is None:
            return "no leader"
        if set(self.replicas) - set(self.isrs):
            return f"leader {self.leader}, in sync {','.join(map(str, self.isrs))} of {','.join(map(str, self.replicas))}"
        return f"leader {self.leader}"


@dataclass
class GroupLag:
    group: str
    state: str
    members: int
    partitions: list[PartitionLag] = field(default_factory=list)
    #: Who is consuming: each member's client id, host, assigned partitions and static instance id.
    consumers: list[GroupMember] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(p.lag for p in self.partitions)

    def as_dict(self, now_ms: int) -> dict[str, Any]:
        ages = [p.oldest_unconsumed_ms for p in self.partitions if p.oldest_unconsumed_ms]
        oldest = min(ages) if ages else None
        return {
            "group": self.group, "state": self.state, "members": self.members, "lag": self.total,
            "oldest_unconsumed_at": iso_ms(oldest),
            "oldest_unconsumed_age_seconds": round((now_ms - oldest) / 1000, 3) if oldest else None,
            "partitions": [p.as_dict(now_ms) for p in self.partitions],
            "consumers": [m.as_dict() for m in self.consumers],
        }


def group_lag(kafka: Kafka, groups: list[str] | None, *, all_topics: bool = False, topic: str | None = None) -> list[GroupLag]:
    """Lag of ``groups`` (every group with commits on outbox topics when None)."""
    explicit = groups is not None
    names = groups if explicit else kafka.group_ids()
    result: list[GroupLag] = []
    for name in names:
        if explicit:
            info, committed = kafka.require_group(name)
        else:
            committed = kafka.committed(name)
            info = None
        wanted = _wanted(committed, info, topic, all_topics or explicit)
        if not wanted:
            continue
        if info is None:
            info = kafka.describe_group(name)
        result.append(GroupLag(name, info.state, len(info.members), _partitions(kafka, wanted), list(info.members)))
    _ages(kafka, [p for g in result for p in g.partitions])
    return result


def _wanted(committed: dict[tuple[str, int], int], info: GroupInfo | None, topic: str | None, any_topic: bool) -> dict[tuple[str, int], int | None]:
    """The partitions to report (of ``topic`` when given; outbox topics only unless ``any_topic``)
    with their committed offsets; a running group's assignments count even before its first commit (None)."""
    wanted: dict[tuple[str, int], int | None] = {
        tp: o for tp, o in committed.items()
        if (topic is None or tp[0] == topic)
        and (any_topic or tp[0].startswith(TOPIC_PREFIX))
    }
    if info is not None:
        for member in info.members:
            for tp in member.assignments:
                if topic is None or tp[0] == topic:
                    wanted.setdefault(tp, None)
    return wanted


def _partitions(kafka: Kafka, committed: dict[tuple[str, int], int | None]) -> list[PartitionLag]:
    out = []
    for topic in sorted({t for t, _ in committed}):
        if not kafka.topic_exists(topic):
            continue
        try:
            marks = kafka.watermarks(topic, sorted(p for t, p in committed if t == topic))
        except UnknownTopicError:  # deleted since the metadata was read: no lag on it any more
            continue
        meta = kafka.metadata().topics.get(topic)
        for p, (low, high) in sorted(marks.items()):
            offset = committed.get((topic, p))
            base = offset if offset is not None and offset >= low else low
            out.append(PartitionLag(topic, p, offset, high, low, max(0, high - base), **_placement(meta, p)))
    return out


def _placement(topic_meta: Any, partition: int) -> dict[str, Any]:
    """The partition's leader, replicas and in-sync replicas from the metadata (empty when unknown)."""
    part = topic_meta.partitions.get(partition) if topic_meta is not None else None
    if part is None:
        return {}
    leader = part.leader if part.leader is not None and part.leader >= 0 else None
    return {"leader": leader, "replicas": tuple(part.replicas), "isrs": tuple(part.isrs)}


def _ages(kafka: Kafka, parts: list[PartitionLag]) -> None:
    """The timestamp of the first unconsumed record of each lagging partition (bounded)."""
    lagging = [p for p in parts if p.lag > 0][:MAX_AGE_LOOKUPS]
    positions = {}
    for p in lagging:
        start = p.committed if p.committed is not None and p.committed >= p.earliest else p.earliest
        positions[(p.topic, p.partition)] = start
    found = kafka.read_first(positions)
    for p in lagging:
        msg = found.get((p.topic, p.partition))
        if msg is not None and msg.timestamp()[0]:
            p.oldest_unconsumed_ms = msg.timestamp()[1]


def pipeline_state(database_url: str, connect_url: str, connector: str | None = None, slot: str | None = None) -> dict[str, Any]:
    """The replication slot and the connector/tasks (default: the default pipeline's), each
    reported, never raised."""
    from postbox.connector import connector_status
    from postbox.slot import SLOT_NAME, slot_status

    return {"slot": slot_status(database_url, slot or SLOT_NAME), "connector": connector_status(connect_url, connector)}


def max_lag_alerts(groups: list[GroupLag], pipe: dict[str, Any], max_lag: int | None, max_slot_lag: int | None = None) -> list[str]:
    """Why `postbox lag --max-lag N` trips, one line per check, empty when none does.

    Consumer lag alone misses a CDC outage: with Connect down or the connector failed, Kafka lag
    is 0 while events pile up in the replication slot. So the alert covers the whole path: each
    group's lag (``max_lag``, when given), the connector and its tasks (RUNNING), the slot (active,
    its WAL kept) and, with ``max_slot_lag``, the slot's lag in bytes (a connector stuck while it
    still reports RUNNING)."""
    from postbox.connector import flowing

    tripped = [f"group {g.group}: lag {g.total:,} > --max-lag {max_lag:,}" for g in groups
               if max_lag is not None and g.total > max_lag]  # fmt: skip
    conn = pipe["connector"]
    if not flowing(conn):
        tripped.append(_connector_alert(conn))
    tripped += _slot_alerts(pipe["slot"], max_slot_lag)
    return tripped


def _connector_alert(conn: dict[str, Any]) -> str:
    """Why a connector that is not flowing trips the alert: its error, or its tasks' states."""
    failing = [f"task {t['id']} {t['state']}" for t in conn.get("tasks", []) if t.get("state") != "RUNNING"]
    detail = conn.get("error") or ", ".join(failing) or ("no task" if conn.get("state") == "RUNNING" else "")
    return (f"connector {conn['name']}: {conn['state']}" + (f" ({detail})" if detail else "")
            + ": events are not read from the database into Kafka")  # fmt: skip


def _slot_alerts(slot: dict[str, Any], max_slot_lag: int | None) -> list[str]:
    """Why the replication slot trips the alert: not active, its WAL lost, or too far behind."""
    from postbox.slot import LOSS_STATES

    tripped = []
    if slot.get("state") != "active":
        reason = f" ({slot['error']})" if slot.get("error") else ""
        tripped.append(f"replication slot {slot.get('name')}: {slot.get('state')}{reason}: nothing streams the outbox's WAL")
    if slot.get("wal_status") in LOSS_STATES:
        tripped.append(f"replication slot {slot.get('name')}: wal_status {slot['wal_status']}: events may never be published")
    lag_bytes = slot.get("lag_bytes")
    if max_slot_lag is not None and lag_bytes is not None and lag_bytes > max_slot_lag:
        tripped.append(f"replication slot {slot.get('name')}: lag {lag_bytes:,} bytes > --max-slot-lag {max_slot_lag:,}: "
                       "Debezium is not confirming the WAL")  # fmt: skip
    return tripped


def now_ms() -> int:
    return int(datetime.now(timezone.utc).timestamp() * 1000)
