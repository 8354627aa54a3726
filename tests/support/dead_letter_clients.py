"""Stand-ins for the Kafka clients of :class:`postbox.consumer.deadletter.DeadLetters` (a producer
and an admin client), for tests that run the real class without a broker: topics described as a
broker would, and each produced record answered at ``flush`` as the test scripts it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from postbox.consumer.deadletter import H_OFFSET, H_REFERENCE_ONLY

#: A stand-in delivery report: no report before the flush ends (not acknowledged in time).
LOST = object()


@dataclass
class Done:
    """A future that is already resolved (what the admin client's calls return)."""

    value: Any = None
    error: BaseException | None = None

    def result(self, timeout: float | None = None) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


@dataclass
class Entry:
    value: str


@dataclass
class PartitionMeta:
    replicas: list[int] = field(default_factory=lambda: [1])


@dataclass
class TopicMeta:
    partitions: dict[int, PartitionMeta]
    error: Any = None


@dataclass
class Metadata:
    topics: dict[str, TopicMeta]


class StandInAdmin:
    """Topics (partition count and ``max.message.bytes``) as a broker would describe them."""

    def __init__(self, topics: dict[str, tuple[int, int]]) -> None:
        self.topics = dict(topics)
        self.created: list[Any] = []
        self.described: list[str] = []
        #: Topics whose creation the broker refuses (an ACL without CreateTopics).
        self.refuse_create: set[str] = set()

    def list_topics(self, topic: str | None = None, timeout: float | None = None) -> Metadata:
        return Metadata({name: TopicMeta({p: PartitionMeta() for p in range(count)}) for name, (count, _limit) in self.topics.items()})

    def create_topics(self, new_topics: list[Any]) -> dict[str, Done]:
        out = {}
        for new in new_topics:
            self.created.append(new)
            if new.topic in self.refuse_create:
                out[new.topic] = Done(error=KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)))
                continue
            self.topics[new.topic] = (new.num_partitions, int(new.config["max.message.bytes"]))
            out[new.topic] = Done()
        return out

    def describe_configs(self, resources: list[Any]) -> dict[Any, Done]:
        out = {}
        for resource in resources:
            self.described.append(resource.name)
            _count, limit = self.topics[resource.name]
            out[resource] = Done({"max.message.bytes": Entry(str(limit))})
        return out


@dataclass
class Produced:
    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    partition: int | None

    def header(self, name: str) -> bytes | None:
        return dict(self.headers).get(name)

    @property
    def offset(self) -> int:
        return int(self.header(H_OFFSET) or b"-1")

    @property
    def reference_only(self) -> bool:
        return self.header(H_REFERENCE_ONLY) == b"true"


class StandInProducer:
    """Takes produce calls and answers each at ``flush`` as ``answer`` says (an error, None for an
    acknowledgement, LOST for no report in time); ``refuse`` raises from ``produce`` itself."""

    def __init__(self, answer: Callable[[Produced], Any] = lambda _p: None,
                 refuse: Callable[[Produced], BaseException | None] = lambda _p: None) -> None:
        self.answer = answer
        self.refuse = refuse
        self.produced: list[Produced] = []
        self._waiting: list[tuple[Produced, Callable[..., None]]] = []

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None, headers: Any = None,
                on_delivery: Callable[..., None] | None = None, partition: int | None = None) -> None:
        record = Produced(topic, key, value, list(headers or []), partition)
        self.produced.append(record)
        error = self.refuse(record)
        if error is not None:
            raise error
        assert on_delivery is not None
        self._waiting.append((record, on_delivery))

    def poll(self, _timeout: float) -> int:
        return 0

    def flush(self, _timeout: float) -> int:
        waiting, self._waiting = self._waiting, []
        for record, report in waiting:
            error = self.answer(record)
            if error is not LOST:
                report(error, None)
        return 0
