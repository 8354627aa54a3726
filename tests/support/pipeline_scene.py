"""The consumer runtime's pipeline on a real Redis, with Kafka stood in for: for tests of what
gets committed (the partition's ``done``) when Redis changes under it, without a broker.

Records are partition 0 of topic ``t``, one JSON ``Counted`` event of aggregate ``a`` per offset,
the same event id each time an offset is read (a redelivery). The handler pushes the offset to
``{t:a}:seq``, or raises once ``raising`` is set (a deploy that broke it). The dead-letter producer
acknowledges everything and remembers the offsets it got."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import redis

from postbox.consumer import App, ConsumerConfig, ConsumerRuntime
from postbox.consumer.partition_state import PartitionState
from postbox.effects import EffectsEngine
from tests.support.kafka import StandInRecord

_RUN = uuid.uuid4().int >> 64


class Redelivered(StandInRecord):
    """The record at ``offset``, carrying the same event each time it is read."""

    def headers(self) -> list[tuple[str, bytes]]:
        event_id = str(uuid.UUID(int=(_RUN << 64) | self.offset()))
        return [("id", event_id.encode()), ("event_type", b"Counted"), ("aggregate_type", b"t")]


class DeadLetters:
    def __init__(self) -> None:
        self.sent: list[int] = []

    def record(self, _engine: object, _entries: object) -> None:
        return None

    def send(self, items: list[Any]) -> list[None]:
        self.sent += [origin.offset for origin, _failure in items]
        return [None for _ in items]


class StandInConsumer:
    def pause(self, _partitions: object) -> None:
        return None

    def resume(self, _partitions: object) -> None:
        return None

    def seek(self, _partition: object) -> None:
        return None


class Scene:
    """A runtime on ``client`` whose engine ``engine(client)`` builds."""

    def __init__(self, client: redis.Redis, engine: Callable[[redis.Redis], EffectsEngine]) -> None:
        self.raising = False
        app = App("g", require_schemas=False)
        app.catch_all(self._handle)
        config = ConsumerConfig.load({}, group="g", topics="t", redis_url="redis://127.0.0.1:1/0", kafka_bootstrap="127.0.0.1:1")
        self.runtime = ConsumerRuntime(app, config, redis_client=client, install_signals=False)
        self.runtime.engine = engine(client)
        self.letters = DeadLetters()
        self.runtime.pipeline.dead_letters = self.letters  # type: ignore[assignment]
        self.runtime.partitions.consumer = StandInConsumer()  # type: ignore[assignment]
        self.runtime.pipeline.carry_delay_s = 0.0

    def _handle(self, event: Any, fx: Any) -> None:
        if self.raising:
            raise ValueError("the deployed handler fails on this event")
        fx.rpush("{t:a}:seq", event.payload["seq"])

    def assign(self) -> PartitionState:
        """The partition as its next owner gets it (nothing of a last owner's commit landed)."""
        state = self.runtime.states[("t", 0)] = PartitionState("t", 0)
        return state

    def deliver(self, *offsets: int) -> None:
        """One batch of the records at ``offsets`` (default: offset 0), prepared, launched, settled."""
        pipeline = self.runtime.pipeline
        pipeline.launch(pipeline.prepare([Redelivered(o) for o in offsets or (0,)]))  # type: ignore[misc]
        pipeline.settle()

    def retry(self, state: PartitionState, *offsets: int) -> None:
        """The paused partition's retry, from where it stopped."""
        state.resume_at = 0.0
        self.runtime.partitions.resume_due()
        self.deliver(*offsets)

    def retries(self, reason: str) -> float:
        return self.runtime.metrics.value("postbox_consumer_retries_total", reason=reason)

    def close(self) -> None:
        self.runtime.pipeline.close()
