"""A model of Kafka, for driving the real consumer runtime without a broker.

What it keeps, as Kafka does for one topic: each partition's records in offset order, the
group's committed offsets (moved only by a commit that lands), and the acknowledged records of
``<topic>.dlq``. What a client sees of it:

- :class:`ModelClient` is the runtime's ``Consumer``: assign (a group member starts at the
  committed offset), pause, resume, seek, ``consume`` (the flowing partitions' next records, a
  random number of each, interleaved across partitions as a fetch does, in offset order within
  one), ``get_watermark_offsets`` and commits. An asynchronous commit is *sent* when ``commit``
  returns and lands (or is refused, while :attr:`KafkaModel.refuse_commits` when it was sent) no
  later than the next ``consume``, which serves its callback, as librdkafka serves ``on_commit``
  in poll; a later commit never overtakes it (the coordinator takes one member's requests in
  order); one still in flight when its process dies lands or not (:meth:`ModelClient.crash`). A
  synchronous commit lands or raises at once, after the asynchronous ones sent before it. With ``eof`` (a window's client) a partition read to its end says so once, as
  ``enable.partition.eof`` does.
- :meth:`KafkaModel.dead_letter_clients` gives the producer and admin stand-ins of the real
  :class:`~postbox.consumer.deadletter.DeadLetters`: a dead letter is acknowledged (and kept in
  :attr:`KafkaModel.dead_letters`) while :attr:`KafkaModel.dlq_up`, else it times out.

Left out: rebalances other members cause, fetch errors, retention, compaction, transactions.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from postbox.consumer.deadletter import H_PARTITION
from tests.support.dead_letter_clients import Produced, StandInAdmin, StandInProducer

TOPIC = "t"
#: What the runtime is told when a commit or a dead letter does not land.
COMMIT_REFUSED = KafkaError(KafkaError.REQUEST_TIMED_OUT)


@dataclass(frozen=True)
class LogRecord:
    """One record: an event of ``aggregate`` (the Kafka key), its ``seq``-th."""

    partition: int
    offset: int
    event_id: str
    aggregate: str
    seq: int


class Message:
    """A record (or a partition's end, ``eof``) as confluent-kafka hands it to the runtime."""

    __slots__ = ("record", "eof")

    def __init__(self, record: LogRecord | None = None, eof: tuple[int, int] | None = None) -> None:
        self.record = record
        self.eof = eof

    def error(self) -> KafkaError | None:
        return None if self.record is not None else KafkaError(KafkaError._PARTITION_EOF)

    def topic(self) -> str:
        return TOPIC

    def partition(self) -> int:
        return self.record.partition if self.record is not None else self.eof[0]  # type: ignore[index]

    def offset(self) -> int:
        return self.record.offset if self.record is not None else self.eof[1]  # type: ignore[index]

    def key(self) -> bytes | None:
        return self.record.aggregate.encode() if self.record is not None else None

    def value(self) -> bytes | None:
        return json.dumps({"seq": self.record.seq}).encode() if self.record is not None else None

    def headers(self) -> list[tuple[str, bytes]]:
        if self.record is None:
            return []
        return [("id", self.record.event_id.encode()), ("event_type", b"Counted"), ("aggregate_type", TOPIC.encode())]

    def timestamp(self) -> tuple[int, int]:
        return 2, 1_700_000_000_000 + self.offset()


@dataclass
class KafkaModel:
    partitions: int
    log: list[list[LogRecord]] = field(default_factory=list)
    committed: dict[int, int] = field(default_factory=dict)
    refuse_commits: bool = False
    dlq_up: bool = True
    #: Acknowledged dead letters: (origin partition, origin offset, event id), in order.
    dead_letters: list[tuple[int, int, str]] = field(default_factory=list)
    #: Told of every commit that lands (partition, offset), before it is visible.
    on_land: Callable[[int, int], None] = lambda _p, _o: None

    def __post_init__(self) -> None:
        self.log = [[] for _ in range(self.partitions)]

    def append(self, partition: int, event_id: str, aggregate: str, seq: int) -> LogRecord:
        record = LogRecord(partition, len(self.log[partition]), event_id, aggregate, seq)
        self.log[partition].append(record)
        return record

    def high(self, partition: int) -> int:
        return len(self.log[partition])

    def land(self, partition: int, offset: int) -> None:
        self.on_land(partition, offset)
        self.committed[partition] = offset

    def dead_letter_clients(self) -> tuple[StandInProducer, StandInAdmin]:
        limit = 1_000_000
        admin = StandInAdmin({TOPIC: (self.partitions, limit), TOPIC + ".dlq": (self.partitions, limit)})
        return StandInProducer(answer=self._dead_letter), admin

    def _dead_letter(self, produced: Produced) -> KafkaError | None:
        if not self.dlq_up:
            return KafkaError(KafkaError._MSG_TIMED_OUT)
        event_id = produced.header("id")
        self.dead_letters.append((int(produced.header(H_PARTITION) or b"-1"), produced.offset, (event_id or b"").decode()))
        return None


class ModelClient(Consumer):
    """The runtime's Kafka client over a :class:`KafkaModel` (see the module docs). No librdkafka
    handle is made: every method the runtime calls is defined here."""

    def __init__(self, kafka: KafkaModel, rng: random.Random, *, eof: bool = False) -> None:  # noqa: D107 - no Consumer.__init__
        self.kafka = kafka
        self.rng = rng
        self.eof = eof
        self.positions: dict[int, int] = {}
        self.paused: set[int] = set()
        self._eof_said: set[int] = set()
        self._in_flight: list[tuple[list[TopicPartition], bool]] = []
        #: Commits landed (or refused) whose callback the next ``consume`` serves.
        self._answers: list[tuple[list[TopicPartition], bool]] = []
        self.on_commit: Callable[[KafkaError | None, list[TopicPartition]], None] | None = None
        #: Called after each ``consume`` (the driver stops the runtime's loop there: one turn).
        self.after_consume: Callable[[], None] = lambda: None
        self.closed = False

    # -- assignment ------------------------------------------------------------------------------

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self.positions[tp.partition] = tp.offset if tp.offset >= 0 else self.kafka.committed.get(tp.partition, 0)
            self._eof_said.discard(tp.partition)

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.positions, self.paused = {}, set()
        self.incremental_assign(partitions)

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self.positions.pop(tp.partition, None)

    def unassign(self) -> None:
        self.positions, self.paused = {}, set()

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(TOPIC, p) for p in self.positions]

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.paused |= {tp.partition for tp in partitions}

    def resume(self, partitions: list[TopicPartition]) -> None:
        self.paused -= {tp.partition for tp in partitions}

    def seek(self, partition: TopicPartition) -> None:
        if partition.partition not in self.positions:
            raise KafkaException(KafkaError(KafkaError._STATE, "not assigned"))
        self.positions[partition.partition] = partition.offset
        self._eof_said.discard(partition.partition)

    # -- records ---------------------------------------------------------------------------------

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
        self._serve_commits()
        queues = {}
        for p, at in self.positions.items():
            if p not in self.paused:
                queues[p] = list(self.kafka.log[p][at:at + self.rng.randint(0, num_messages)])
        out: list[Any] = []
        while len(out) < num_messages and any(queues.values()):
            p = self.rng.choice([q for q, records in queues.items() if records])
            record = queues[p].pop(0)
            out.append(Message(record))
            self.positions[p] = record.offset + 1
        if self.eof:
            for p, at in self.positions.items():
                if p not in self.paused and at >= self.kafka.high(p) and p not in self._eof_said:
                    self._eof_said.add(p)
                    out.append(Message(eof=(p, at)))
        self.after_consume()
        return out

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float | None = None, cached: bool = False) -> tuple[int, int]:
        return 0, self.kafka.high(partition.partition)

    # -- commits ---------------------------------------------------------------------------------

    def commit(self, message: Any = None, offsets: list[TopicPartition] | None = None, asynchronous: bool = True) -> Any:
        sent = [TopicPartition(tp.topic, tp.partition, tp.offset) for tp in offsets or []]
        if asynchronous:
            self._in_flight.append((sent, self.kafka.refuse_commits))
            return None
        self._land_in_flight()  # sent before this one: the coordinator takes them first
        if self.kafka.refuse_commits:
            raise KafkaException(COMMIT_REFUSED)
        for tp in sent:
            self.kafka.land(tp.partition, tp.offset)
        return sent

    def _land_in_flight(self) -> None:
        """The asynchronous commits sent and not landed yet land (or are refused), in order; their
        callbacks wait for the next ``consume``."""
        for sent, refused in self._in_flight:
            for tp in sent if not refused else []:
                self.kafka.land(tp.partition, tp.offset)
        self._answers.extend(self._in_flight)
        self._in_flight = []

    def _serve_commits(self) -> None:
        self._land_in_flight()
        answers, self._answers = self._answers, []
        for sent, refused in answers:
            if self.on_commit is not None:
                self.on_commit(COMMIT_REFUSED if refused else None, sent)

    def crash(self, *, commits_land: bool) -> None:
        """The process died: commits still in flight land (sent before the death) or not; nobody
        hears of it."""
        if commits_land:
            self._land_in_flight()
        self._in_flight, self._answers = [], []
        self.closed = True

    def close(self) -> None:
        self._serve_commits()
        self.closed = True


__all__ = ["COMMIT_REFUSED", "KafkaModel", "LogRecord", "Message", "ModelClient", "TOPIC"]
