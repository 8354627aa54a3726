"""Dead letters: ``<origin topic>.dlq`` records and the Redis failure stream.

The DLQ record contract (read by the incident tooling — keep it stable; the record itself is
built in :mod:`postbox.consumer.dlq_record`):

- topic ``<origin topic>.dlq``, created when missing with the origin's partition count (1 if
  unknown) and replica count, and a ``max.message.bytes`` of the origin's plus
  :data:`DLQ_HEADROOM_BYTES` (so whatever the origin took fits with the dead-letter headers); a
  record goes to the origin's partition number when the DLQ has it;
- key and value: the original bytes, unchanged (``None`` stays ``None``);
- headers: every original header, in order, then ``postbox.error`` (one line),
  ``postbox.error.class`` (``DecodeError``, ``UnknownEventType``, ``HandlerError:ValueError``,
  ``InvalidEffectError``, ``EffectFailed:WRONGTYPE``, ...), ``postbox.error.kind`` (``permanent``),
  ``postbox.origin.topic``, ``postbox.origin.partition``, ``postbox.origin.offset``,
  ``postbox.attempts``, ``postbox.group`` and ``postbox.failed_at`` (ISO-8601 UTC), all UTF-8. An
  original header with one of these names (a record replayed from a DLQ) is replaced, not repeated;
- a record too large for the dead-letter topic (its ``max.message.bytes``, known before sending,
  or a broker refusal with MSG_SIZE_TOO_LARGE) is dead-lettered **reference-only**: no value, the
  router's metadata headers, ``postbox.reference-only: true`` and ``postbox.original.bytes``; the
  origin headers say where the original bytes are. A failed record never blocks its partition
  because of its size.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import redis
from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from postbox import kafka_config
from postbox.consumer.dlq_record import (  # noqa: F401 - the contract's names, re-exported
    DLQ_HEADERS,
    DLQ_SUFFIX,
    H_ATTEMPTS,
    H_CLASS,
    H_ERROR,
    H_FAILED_AT,
    H_GROUP,
    H_KIND,
    H_OFFSET,
    H_ORIGINAL_BYTES,
    H_PARTITION,
    H_REFERENCE_ONLY,
    H_TOPIC,
    MAX_ERROR_CHARS,
    DeadLetterRecord,
    Failure,
    Origin,
    dlq_headers,
    dlq_topic,
    letter_for,
    one_line,
    reference_letter,
)
from postbox.kafka_config import KafkaProperties
from postbox.effects import EffectsEngine, EventRef
from postbox.safe_text import safe_text
from postbox.effects.redis_errors import transient_reason
from postbox.redis_client import login_error
from postbox.errors import DeadLetterError, TransientEffectError

log = logging.getLogger("postbox.consumer.dlq")

#: Kafka's broker default ``message.max.bytes`` (used when a topic's limit cannot be read).
BROKER_DEFAULT_MAX_MESSAGE_BYTES = 1_048_588
#: What a dead-letter topic takes beyond its origin's limit: room for the ``postbox.*`` headers.
DLQ_HEADROOM_BYTES = 64 * 1024
_TOO_LARGE = (KafkaError.MSG_SIZE_TOO_LARGE,)


@dataclass(frozen=True, slots=True)
class DlqTopic:
    """A dead-letter topic as the producer needs it: its partition count and record size limit."""

    name: str
    partitions: int
    max_bytes: int


class DeadLetters:
    """Writes DLQ records (acknowledged) and failure-stream entries for one consumer group.

    ``properties``: the user's Kafka client properties (TLS, SASL...), as the consumer's; the
    clients are built by :mod:`postbox.kafka_config` (the dead-letter producer role).
    """

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
        self._topics: dict[str, DlqTopic] = {}
        self._lock = threading.Lock()

    # -- topics --------------------------------------------------------------------------------

    def ensure_topic(self, origin: str) -> DlqTopic:
        """``<origin>.dlq``, created if missing (origin's partition and replica counts, origin's
        record limit plus headroom), with its partition count and ``max.message.bytes``.
        Raises :class:`DeadLetterError` (transient) when Kafka cannot say."""
        name = dlq_topic(origin)
        cached = self._topics.get(name)
        if cached is not None:
            return cached
        with self._lock:
            try:
                meta = self.admin.list_topics(timeout=10)
                if name not in meta.topics or meta.topics[name].error is not None:
                    self._create(name, origin, meta)
                    meta = self.admin.list_topics(topic=name, timeout=10)
                topic_meta = meta.topics.get(name)
                count = len(topic_meta.partitions) if topic_meta is not None and topic_meta.partitions else 0
                limit = self._max_message_bytes(name)
            except KafkaException as exc:
                raise DeadLetterError(f"cannot create or describe dead-letter topic {name}: {exc}") from exc
            except Exception as exc:  # concurrent.futures.TimeoutError and friends
                raise DeadLetterError(f"cannot create or describe dead-letter topic {name}: {type(exc).__name__}: {exc}") from exc
            if count < 1:
                raise DeadLetterError(f"dead-letter topic {name} has no partitions in the metadata yet")
            topic = self._topics[name] = DlqTopic(name, count, limit)
            return topic

    def _create(self, name: str, origin: str, meta: Any) -> None:
        origin_meta = meta.topics.get(origin)
        partitions, replicas = 1, 1
        if origin_meta is not None and origin_meta.error is None and origin_meta.partitions:
            partitions = len(origin_meta.partitions)
            replicas = max(1, len(next(iter(origin_meta.partitions.values())).replicas))
        limit = self._max_message_bytes(origin) + DLQ_HEADROOM_BYTES
        new = NewTopic(name, num_partitions=partitions, replication_factor=replicas, config={"max.message.bytes": str(limit)})
        try:
            self.admin.create_topics([new])[name].result(timeout=15)
            log.info("created dead-letter topic %s (%d partitions, max.message.bytes %d)", name, partitions, limit)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise

    def _max_message_bytes(self, topic: str) -> int:
        """The topic's ``max.message.bytes``, or the broker's default when it cannot be read (an
        ACL without DescribeConfigs, a timeout): a dead letter never waits on this lookup — one the
        broker refuses as too large is sent again reference-only anyway."""
        resource = ConfigResource(ResourceType.TOPIC, topic)
        try:
            entries = self.admin.describe_configs([resource])[resource].result(timeout=10)
            return int(entries["max.message.bytes"].value)
        except Exception as exc:  # noqa: BLE001 - KafkaException, timeouts, a missing entry
            log.warning("cannot read max.message.bytes of %s (%s); assuming the broker default %d", topic, exc, BROKER_DEFAULT_MAX_MESSAGE_BYTES)
            return BROKER_DEFAULT_MAX_MESSAGE_BYTES

    # -- records -------------------------------------------------------------------------------

    def send(self, items: Sequence[tuple[Origin, Failure]]) -> list[str | None]:
        """Produce one DLQ record per item and wait for every acknowledgement.

        Returns, per item, ``None`` when Kafka acknowledged it, else the error text (the caller
        must not commit past that record and retries it later). A record the broker refuses as
        too large is sent again reference-only (see :mod:`postbox.consumer.dlq_record`).
        """
        failed_at = datetime.now(timezone.utc)
        outcome: list[str | None] = ["not acknowledged within the delivery timeout"] * len(items)
        letters: dict[int, tuple[DeadLetterRecord, DlqTopic]] = {}
        for index, (origin, failure) in enumerate(items):
            try:
                topic = self.ensure_topic(origin.topic)
            except DeadLetterError as exc:
                outcome[index] = str(exc)
                continue
            letters[index] = (letter_for(origin, failure, group=self.group, limit=topic.max_bytes, failed_at=failed_at), topic)
        too_large = self._produce(letters, items, outcome)
        if too_large:
            smaller = {
                i: (reference_letter(items[i][0], items[i][1], group=self.group, failed_at=failed_at, limit=letters[i][1].max_bytes), letters[i][1])
                for i in too_large
            }
            for i in smaller:
                log.warning("dead letter of %s refused as too large (%d bytes); sending it reference-only",
                            items[i][0].where, letters[i][0].size)
            self._produce(smaller, items, outcome)
        for index, error in enumerate(outcome):
            if error is not None:  # read the topic's limits again next time (an operator may fix them)
                self._topics.pop(dlq_topic(items[index][0].topic), None)
        return outcome

    def _produce(
        self,
        letters: Mapping[int, tuple[DeadLetterRecord, DlqTopic]],
        items: Sequence[tuple[Origin, Failure]],
        outcome: list[str | None],
    ) -> list[int]:
        """Produce ``letters`` and flush; fill ``outcome``; return the indexes refused as too
        large (full form only: a reference-only letter that is refused stays an error)."""
        too_large: list[int] = []
        for index, (letter, topic) in letters.items():
            origin = items[index][0]

            def report(err: KafkaError | None, _msg: Message, index: int = index, letter: DeadLetterRecord = letter,
                       topic: DlqTopic = topic) -> None:
                if err is not None and err.code() in _TOO_LARGE and not letter.reference_only:
                    too_large.append(index)
                outcome[index] = None if err is None else f"DLQ produce failed: {err}" + _size_hint(letter, topic, err)

            kwargs = {"partition": origin.partition} if origin.partition < topic.partitions else {}
            outcome[index] = "not acknowledged within the delivery timeout"
            try:
                self.producer.produce(letter.topic, value=letter.value, key=letter.key, headers=letter.headers, on_delivery=report, **kwargs)
            except (BufferError, KafkaException) as exc:
                error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
                if isinstance(error, KafkaError) and error.code() in _TOO_LARGE and not letter.reference_only:
                    too_large.append(index)
                outcome[index] = f"DLQ produce refused: {exc}"
            self.producer.poll(0)
        self.producer.flush(self.delivery_timeout_s)
        return too_large

    def record(self, engine: EffectsEngine, entries: Sequence[tuple[Origin, str | None, Failure]]) -> None:
        """XADD failure-stream entries for failures the engine did not record itself.

        Raises :class:`TransientEffectError` for what heals by waiting (an outage, a cluster
        failover: :func:`~postbox.effects.redis_errors.transient_reason`, the engine's own rule), so
        the record's partition holds there and retries, and the :class:`~postbox.errors.ConfigError` of a refused
        login (the runtime stops on it, exit 3); a refusal that waiting does not fix is logged, and
        the dead letter goes on without its failure-stream entry.
        """
        todo = [(m, eid, f) for m, eid, f in entries if not f.recorded]
        if not todo:
            return
        pipe = engine.client.pipeline(transaction=False)
        for origin, event_id, failure in todo:
            anchor_id = event_id or f"{origin.topic}:{origin.partition}:{origin.offset}"
            key = engine.failures_key(EventRef(anchor_id, anchor_id))
            pipe.xadd(
                key,
                {
                    "event_id": event_id or "",
                    "group": self.group,
                    "topic": origin.topic,
                    "partition": str(origin.partition),
                    "offset": str(origin.offset),
                    "error_class": failure.error_class,
                    "error": one_line(failure.error),
                },
                maxlen=engine.failures_maxlen,
                approximate=True,
            )
            pipe.pexpire(key, engine.marker_ttl_ms)
        try:
            pipe.execute()
        except (redis.RedisError, redis.RedisClusterException) as exc:  # the latter is not a RedisError
            refused = login_error(exc)  # credentials revoked, a wrong CA: no retry fixes them (as in the engine)
            if refused is not None:
                raise refused from exc
            reason = transient_reason(exc)
            if reason is not None:  # an outage, a failover: the partition waits here and retries
                raise TransientEffectError(f"cannot write the failure stream ({reason}): {exc}", reason=reason) from exc
            if not isinstance(exc, redis.ResponseError):
                raise
            log.error("failure-stream XADD refused (%s); the DLQ record is the complete record", exc)
        except Exception as exc:  # noqa: BLE001 - what one record's data does here must not stop the loop
            log.error("failure-stream XADD failed (%s: %s); the DLQ record is the complete record",
                      type(exc).__name__, safe_text(str(exc)))  # fmt: skip

    def close(self, timeout: float = 10.0) -> None:
        self.producer.flush(timeout)


def _size_hint(letter: DeadLetterRecord, topic: DlqTopic, err: KafkaError) -> str:
    if err.code() not in _TOO_LARGE:
        return ""
    return (f" (a reference-only dead letter of ~{letter.size:,} bytes does not fit {topic.name}, which takes"
            f" {topic.max_bytes:,}: raise its max.message.bytes)")


__all__ = [
    "DLQ_HEADERS", "DLQ_SUFFIX", "H_ATTEMPTS", "H_CLASS", "H_ERROR", "H_FAILED_AT", "H_GROUP", "H_KIND", "H_OFFSET",
    "H_ORIGINAL_BYTES", "H_PARTITION", "H_REFERENCE_ONLY", "H_TOPIC", "MAX_ERROR_CHARS", "DeadLetterRecord", "DeadLetters",
    "DlqTopic", "Failure", "Origin", "dlq_headers", "dlq_topic", "one_line",
]
