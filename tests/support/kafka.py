"""Reading outbox topics in tests: bounded waits, unique consumer groups, no committed offsets."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, Message


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes | None]

    @property
    def event_id(self) -> str | None:
        raw = self.headers.get("id")
        return raw.decode() if raw else None


def to_record(message: Message) -> Record:
    return Record(
        topic=message.topic(),
        partition=message.partition(),
        offset=message.offset(),
        key=message.key(),
        value=message.value(),
        headers={k: v for k, v in (message.headers() or [])},
    )


def read_until(
    bootstrap: str,
    topic: str,
    done: Callable[[list[Record]], bool],
    timeout: float = 90.0,
    linger: float = 0.0,
) -> list[Record]:
    """Read `topic` from the beginning until `done(records)` holds or `timeout` passes, then
    `linger` seconds more (to catch duplicates that would follow).

    Waits for the topic to exist (the Outbox Event Router creates it on first use); returns what
    was read either way, so the assertion that follows shows what arrived.
    """
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"test-{uuid.uuid4().hex}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "topic.metadata.refresh.interval.ms": 500,
    })
    records: list[Record] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not done(records):
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                if message.error().code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._PARTITION_EOF):
                    continue
                raise AssertionError(f"Kafka error while reading {topic}: {message.error()}")
            records.append(to_record(message))
        if linger and done(records):
            end = time.monotonic() + linger
            while time.monotonic() < end:
                message = consumer.poll(0.2)
                if message is not None and not message.error():
                    records.append(to_record(message))
    finally:
        consumer.close()
    return records


def read_for(bootstrap: str, topic: str, seconds: float) -> list[Record]:
    """Everything on `topic` that arrives within `seconds` (to show that nothing more comes)."""
    return read_until(bootstrap, topic, lambda _records: False, timeout=seconds)


def drop_topics(bootstrap: str, *topics: str) -> None:
    """Delete topics a test made (and their .dlq), so no later check sees them; best effort."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [t for topic in topics for t in (topic, f"{topic}.dlq")]
    existing = set(admin.list_topics(timeout=10).topics)
    futures = admin.delete_topics([t for t in names if t in existing], operation_timeout=10) if existing & set(names) else {}
    for future in futures.values():
        try:
            future.result(timeout=15)
        except Exception:  # noqa: BLE001 - already gone, or the broker is slow: not the test's verdict
            pass


class StandInRecord:
    """A consumed record of topic ``t`` partition 0 as confluent-kafka hands it to the runtime
    (the runtime reads nothing else): a JSON ``Counted`` event of aggregate ``a`` carrying its
    offset as ``seq``, with a fresh event id. For unit tests that drive the pipeline without Kafka."""

    def __init__(self, offset: int) -> None:
        self._offset = offset

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return b"a"

    def timestamp(self) -> tuple[int, int]:
        """LogAppendTime (type 2), one millisecond per offset from a fixed instant."""
        return 2, 1_700_000_000_000 + self._offset

    def value(self) -> bytes:
        return json.dumps({"seq": self._offset}).encode()

    def headers(self) -> list[tuple[str, bytes]]:
        return [("id", str(uuid.uuid4()).encode()), ("event_type", b"Counted"), ("aggregate_type", b"t")]


class PartitionedRecord(StandInRecord):
    """:class:`StandInRecord` on a partition of its own, aggregate ``a<partition>`` (its key)."""

    def __init__(self, partition: int, offset: int) -> None:
        super().__init__(offset)
        self._partition = partition

    def partition(self) -> int:
        return self._partition

    def key(self) -> bytes:
        return b"a%d" % self._partition
