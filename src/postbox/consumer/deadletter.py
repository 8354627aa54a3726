"""Dead letters: ``<origin topic>.dlq`` records and the Redis failure stream.

The DLQ record contract (read by the incident tooling — keep it stable):

- topic ``<origin topic>.dlq``, created when missing with the origin's partition count (1 if
  unknown) and replica count; a record goes to the origin's partition number when the DLQ has it;
- key and value: the original bytes, unchanged (``None`` stays ``None``);
- headers: every original header, in order, then ``postbox.error`` (one line),
  ``postbox.error.class`` (``DecodeError``, ``UnknownEventType``, ``HandlerError:ValueError``,
  ``InvalidEffectError``, ``EffectFailed:WRONGTYPE``, ...), ``postbox.error.kind`` (``permanent``),
  ``postbox.origin.topic``, ``postbox.origin.partition``, ``postbox.origin.offset``,
  ``postbox.attempts``, ``postbox.group`` and ``postbox.failed_at`` (ISO-8601 UTC), all UTF-8. An
  original header with one of these names (a record replayed from a DLQ) is replaced, not repeated.

The produce is acknowledged (``acks=all``, idempotent producer, delivery report checked after a
flush) before the origin offset is committed; an unacknowledged produce is a transient failure.

Failure stream: effect failures are recorded by the engine's script itself; for failures that
never reached the engine (decode, unknown type, handler) the runtime XADDs to the same stream
(:meth:`EffectsEngine.failures_key`) with fields ``event_id``, ``group``, ``topic``,
``partition``, ``offset``, ``error_class``, ``error`` (capped like the engine's, same TTL).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

import redis
from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from postbox import kafka_config
from postbox.kafka_config import KafkaProperties

from postbox.effects import Effects, EffectsEngine
from postbox.errors import DeadLetterError, TransientEffectError

log = logging.getLogger("postbox.consumer.dlq")

DLQ_SUFFIX = ".dlq"
H_ERROR = "postbox.error"
H_CLASS = "postbox.error.class"
H_KIND = "postbox.error.kind"
H_TOPIC = "postbox.origin.topic"
H_PARTITION = "postbox.origin.partition"
H_OFFSET = "postbox.origin.offset"
H_ATTEMPTS = "postbox.attempts"
H_GROUP = "postbox.group"
H_FAILED_AT = "postbox.failed_at"
DLQ_HEADERS = (H_ERROR, H_CLASS, H_KIND, H_TOPIC, H_PARTITION, H_OFFSET, H_ATTEMPTS, H_GROUP, H_FAILED_AT)
MAX_ERROR_CHARS = 2000


@dataclass(frozen=True, slots=True)
class Failure:
    """Why one record is dead-lettered."""

    error_class: str
    error: str
    attempts: int = 1
    #: The engine's script already wrote the failure-stream record (effect failures).
    recorded: bool = False
    kind: str = "permanent"


def dlq_topic(origin: str) -> str:
    return origin + DLQ_SUFFIX


def one_line(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def dlq_headers(
    original: Sequence[tuple[str, bytes | None]] | None,
    failure: Failure,
    *,
    topic: str,
    partition: int,
    offset: int,
    group: str,
    failed_at: datetime | None = None,
) -> list[tuple[str, bytes | None]]:
    """The DLQ record's headers: the original ones (ours replaced), then the ``postbox.*`` ones."""
    when = (failed_at or datetime.now(timezone.utc)).astimezone(timezone.utc)
    ours = {
        H_ERROR: one_line(failure.error),
        H_CLASS: failure.error_class,
        H_KIND: failure.kind,
        H_TOPIC: topic,
        H_PARTITION: str(partition),
        H_OFFSET: str(offset),
        H_ATTEMPTS: str(failure.attempts),
        H_GROUP: group,
        H_FAILED_AT: when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
    }
    kept = [(k, v) for k, v in (original or []) if k not in ours]
    return kept + [(k, v.encode("utf-8")) for k, v in ours.items()]


class DeadLetters:
    """Writes DLQ records (acknowledged) and failure-stream entries for one consumer group."""

    def __init__(
        self,
        bootstrap: str,
        group: str,
        *,
        client_id: str | None = None,
        delivery_timeout_s: float = 15.0,
        producer: Producer | None = None,
        admin: AdminClient | None = None,
        properties: KafkaProperties | None = None,
    ) -> None:
        self.group = group
        self.delivery_timeout_s = delivery_timeout_s
        props = properties or KafkaProperties()
        client_id = client_id or f"postbox-dlq-{group}"
        role = kafka_config.dead_letter_producer_role(client_id=client_id, delivery_timeout_ms=int(delivery_timeout_s * 1000))
        self.producer = producer or kafka_config.open_client(Producer, kafka_config.build(bootstrap, props, role), props)
        admin_conf = kafka_config.build(bootstrap, props, kafka_config.admin_role(client_id))
        self.admin = admin or kafka_config.open_client(AdminClient, admin_conf, props)
        self._partitions: dict[str, int] = {}
        self._lock = threading.Lock()

    # -- topics --------------------------------------------------------------------------------

    def ensure_topic(self, origin: str) -> int:
        """Create ``<origin>.dlq`` if missing (origin's partition and replica counts); return its
        partition count. Raises :class:`DeadLetterError` (transient) when Kafka cannot say."""
        name = dlq_topic(origin)
        cached = self._partitions.get(name)
        if cached is not None:
            return cached
        with self._lock:
            try:
                meta = self.admin.list_topics(timeout=10)
                if name not in meta.topics or meta.topics[name].error is not None:
                    origin_meta = meta.topics.get(origin)
                    partitions, replicas = 1, 1
                    if origin_meta is not None and origin_meta.error is None and origin_meta.partitions:
                        partitions = len(origin_meta.partitions)
                        replicas = max(1, len(next(iter(origin_meta.partitions.values())).replicas))
                    future = self.admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=replicas)])[name]
                    try:
                        future.result(timeout=15)
                        log.info("created dead-letter topic %s (%d partitions)", name, partitions)
                    except KafkaException as exc:
                        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                            raise
                    meta = self.admin.list_topics(topic=name, timeout=10)
                topic_meta = meta.topics.get(name)
                count = len(topic_meta.partitions) if topic_meta is not None and topic_meta.partitions else 0
            except KafkaException as exc:
                raise DeadLetterError(f"cannot create or describe dead-letter topic {name}: {exc}") from exc
            except Exception as exc:  # concurrent.futures.TimeoutError and friends
                raise DeadLetterError(f"cannot create or describe dead-letter topic {name}: {type(exc).__name__}: {exc}") from exc
            if count < 1:
                raise DeadLetterError(f"dead-letter topic {name} has no partitions in the metadata yet")
            self._partitions[name] = count
            return count

    # -- records -------------------------------------------------------------------------------

    def send(self, items: Sequence[tuple[Message, Failure]]) -> list[str | None]:
        """Produce one DLQ record per item and wait for every acknowledgement.

        Returns, per item, ``None`` when Kafka acknowledged it, else the error text (the caller
        must not commit past that record and retries it later).
        """
        outcome: list[str | None] = ["not acknowledged within the delivery timeout"] * len(items)
        failed_at = datetime.now(timezone.utc)
        for index, (msg, failure) in enumerate(items):
            topic = msg.topic()
            try:
                partitions = self.ensure_topic(topic)
            except DeadLetterError as exc:
                outcome[index] = str(exc)
                continue

            def report(err: KafkaError | None, _msg: Message, index: int = index) -> None:
                outcome[index] = None if err is None else f"DLQ produce failed: {err}"

            headers = dlq_headers(
                msg.headers(), failure, topic=topic, partition=msg.partition(), offset=msg.offset(),
                group=self.group, failed_at=failed_at,
            )
            kwargs = {"partition": msg.partition()} if msg.partition() < partitions else {}
            try:
                self.producer.produce(
                    dlq_topic(topic), value=msg.value(), key=msg.key(), headers=headers, on_delivery=report, **kwargs
                )
            except (BufferError, KafkaException) as exc:
                outcome[index] = f"DLQ produce refused: {exc}"
            self.producer.poll(0)
        self.producer.flush(self.delivery_timeout_s)
        return outcome

    def record(self, engine: EffectsEngine, entries: Sequence[tuple[Message, str | None, Failure]]) -> None:
        """XADD failure-stream entries for failures the engine did not record itself.

        Raises :class:`TransientEffectError` when Redis cannot be reached (retry later).
        """
        todo = [(m, eid, f) for m, eid, f in entries if not f.recorded]
        if not todo:
            return
        pipe = engine.client.pipeline(transaction=False)
        for msg, event_id, failure in todo:
            anchor_id = event_id or f"{msg.topic()}:{msg.partition()}:{msg.offset()}"
            key = engine.failures_key(anchor_id, Effects())
            pipe.xadd(
                key,
                {
                    "event_id": event_id or "",
                    "group": self.group,
                    "topic": msg.topic(),
                    "partition": str(msg.partition()),
                    "offset": str(msg.offset()),
                    "error_class": failure.error_class,
                    "error": one_line(failure.error),
                },
                maxlen=engine.failures_maxlen,
                approximate=True,
            )
            pipe.pexpire(key, engine.marker_ttl_ms)
        try:
            pipe.execute()
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise TransientEffectError(f"cannot write the failure stream: {exc}", reason="connection") from exc
        except redis.ResponseError as exc:
            code = str(exc).split(" ", 1)[0]
            if code in ("OOM", "BUSY", "LOADING", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "MISCONF"):
                raise TransientEffectError(f"Redis refused the failure-stream XADD: {exc}", reason=code) from exc
            log.error("failure-stream XADD refused (%s); the DLQ record is the complete record", exc)

    def close(self, timeout: float = 10.0) -> None:
        self.producer.flush(timeout)
