"""The audit trail of incident actions: who changed what, when, and how many, for the next on-call.

Where it lives: the Kafka topic ``postbox.audit`` (one partition, ``cleanup.policy=delete``,
``retention.ms=-1``: kept until someone decides otherwise, never compacted away). Why Kafka and not
a Redis stream:

- every machine an engineer runs ``postbox`` from already reaches the same Kafka cluster, and the
  audited actions (dead-letter replays, offset resets) are Kafka writes themselves — if the audit
  cannot be written, the action could not have happened either;
- Kafka writes are replicated and acknowledged by all in-sync replicas (``acks=all``, idempotent
  producer); the shared Redis may run with ``appendfsync everysec`` or evict keys under
  ``maxmemory``, and it is the effects store, where a stream of ours would compete with effects;
- one partition keeps one global order, and the log is append-only: nobody edits history.

A record is one JSON object (schema ``postbox.audit/1``): id, at, user, host, command, target,
count, outcome, details. The record is written after the action, with its outcome; when the write
fails the command prints the record on stderr and exits 1, so it can be filed by hand.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import NewTopic

from postbox.errors import AuditError
from postbox.incident.records import ago
from postbox.kafka_cluster import Kafka

AUDIT_TOPIC_ENV = "POSTBOX_AUDIT_TOPIC"
DEFAULT_AUDIT_TOPIC = "postbox.audit"
SCHEMA = "postbox.audit/1"


def audit_topic() -> str:
    return os.environ.get(AUDIT_TOPIC_ENV) or DEFAULT_AUDIT_TOPIC


def who() -> tuple[str, str]:
    try:
        user = getpass.getuser()
    except Exception:
        user = str(os.getuid()) if hasattr(os, "getuid") else "unknown"
    return user, socket.gethostname()


@dataclass
class AuditRecord:
    command: str
    target: str
    count: int
    outcome: str = "ok"
    details: dict[str, Any] = field(default_factory=dict)
    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    at: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"))
    user: str = field(default_factory=lambda: who()[0])
    host: str = field(default_factory=lambda: who()[1])

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "id": self.id, "at": self.at, "user": self.user, "host": self.host,
            "command": self.command, "target": self.target, "count": self.count,
            "outcome": self.outcome, "details": self.details,
        }


def ensure_topic(kafka: Kafka, topic: str | None = None) -> str:
    topic = topic or audit_topic()
    if kafka.topic_exists(topic):
        return topic
    futures = kafka.admin.create_topics(
        [NewTopic(topic, num_partitions=1, replication_factor=-1,
                  config={"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"})],
        request_timeout=kafka.timeout,
    )
    try:
        futures[topic].result(timeout=kafka.timeout + 1)
    except KafkaException as exc:
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise AuditError(f"cannot create the audit topic {topic}: {exc}") from None
    kafka.metadata(refresh=True)
    return topic


def append(kafka: Kafka, record: AuditRecord) -> dict[str, Any]:
    """Write ``record`` durably (acks=all, flushed); returns where it was written."""
    try:
        topic = ensure_topic(kafka)
        producer = kafka.producer()
        outcome: dict[str, Any] = {}

        def delivered(err: Any, msg: Any) -> None:
            outcome["error"] = err
            outcome["offset"] = msg.offset() if err is None else None

        producer.produce(
            topic, key=record.command.encode(), value=json.dumps(record.as_dict(), sort_keys=True).encode(),
            headers=[("postbox.audit.schema", SCHEMA.encode())], on_delivery=delivered,
        )
        producer.flush(kafka.timeout * 2)
    except (KafkaException, BufferError) as exc:
        raise AuditError(f"audit record not written to Kafka: {exc}", fix=_fix(record)) from None
    if outcome.get("error") is not None or "offset" not in outcome:
        raise AuditError(f"audit record not written to {topic}: {outcome.get('error') or 'no delivery report'}", fix=_fix(record))
    return {"topic": topic, "offset": outcome["offset"]}


def _fix(record: AuditRecord) -> str:
    return "the action itself was done; file this record by hand: " + json.dumps(record.as_dict(), sort_keys=True)


def read(kafka: Kafka, *, since: timedelta | None = None, limit: int = 100, command: str | None = None) -> list[dict[str, Any]]:
    """The newest ``limit`` audit records (optionally only those since ``since`` / of ``command``)."""
    topic = audit_topic()
    if not kafka.topic_exists(topic):
        return []
    marks = kafka.watermarks(topic)
    starts, ends = {}, {}
    for p, (low, high) in marks.items():
        start = low
        if since is not None:
            ts = int(ago(since).timestamp() * 1000)
            start = max(low, kafka.offsets_for_time(topic, [p], ts)[p])
        if command is None:
            start = max(start, high - limit)
        starts[(topic, p)], ends[(topic, p)] = start, high
    out = []
    for msg in kafka.scan(starts, ends, max_records=1_000_000):
        try:
            data = json.loads(msg.value())
        except (TypeError, ValueError):
            continue
        if not isinstance(data, dict):
            continue
        if command and data.get("command") != command and not str(data.get("command", "")).startswith(command + " "):
            continue
        data["offset"] = msg.offset()
        out.append(data)
    out.sort(key=lambda r: (r.get("at") or "", r["offset"]))
    return out[-limit:]


__all__ = ["AuditRecord", "append", "audit_topic", "ensure_topic", "read"]
