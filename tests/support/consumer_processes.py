"""Consumer processes over a :class:`~tests.support.kafka_model.KafkaModel`: the real
:class:`~postbox.consumer.runtime.ConsumerRuntime`, turned one loop at a time.

Each process is a runtime as ``postbox consume`` builds it — its pipeline, batch model,
partitions, owed-verdict store and effects engine on a real Redis, the real
:class:`~postbox.consumer.deadletter.DeadLetters` — with the model's Kafka client in place of
librdkafka's. :meth:`Process.turn` runs the runtime's own loop for exactly one turn (resume what is
due, consume, prepare, settle, launch, commit): the client stops the loop after its ``consume``.
What happens to a process between turns is the runtime's own code too: an orderly stop is its
shutdown (settle, synchronous final commit, close), a rebalance its revoke and assign callbacks. A
crash is the one thing no code of the runtime runs for: the apply in flight finishes in Redis
(the worker thread is waited for, nothing of it is settled or committed), commits still in flight
land or not, and the process is gone.

A window run is the runtime with :class:`~postbox.consumer.window.WindowAssignment`, whose client
is the real :class:`~postbox.consumer.window.WindowConsumer` filtering the model's records.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import redis
from confluent_kafka import TopicPartition

from postbox.consumer import App, ConsumerConfig, ConsumerRuntime
from postbox.consumer.deadletter import DeadLetters
from postbox.consumer.window import Span, WindowAssignment, WindowConsumer
from tests.support.kafka_model import TOPIC, KafkaModel, ModelClient


class WindowClient(WindowConsumer, ModelClient):
    """The window's Kafka client: WindowConsumer's own ``consume`` over the model's (its ``super()``)."""


@dataclass
class Process:
    name: str
    runtime: ConsumerRuntime
    client: ModelClient
    alive: bool = True

    def turn(self) -> None:
        """One turn of the runtime's loop (a window that reached its end makes none)."""
        self.runtime._stop.clear()
        self.runtime._loop()

    def wait_for_apply(self) -> None:
        """Wait until the batch in flight has been applied in Redis (not settled): what the driver
        does to Redis next then comes after that apply, so an example replays exactly."""
        flight = self.runtime.pipeline._in_flight
        if flight is not None and flight.future is not None:
            flight.future.exception()

    @property
    def finished(self) -> bool:
        """A window run that reached its end (a group member never is)."""
        return self.runtime.assignment.finished()

    def stop(self) -> None:
        """SIGTERM: the runtime's shutdown (a group member settles and commits synchronously)."""
        self.runtime._shutdown(commit=True)
        self.alive = False

    def crash(self, *, commits_land: bool) -> None:
        """SIGKILL (see the module docs)."""
        self.runtime.pipeline.close()
        self.client.crash(commits_land=commits_land)
        self.runtime.invoker.runner.close()
        self.alive = False

    def rebalance(self) -> None:
        """Every partition revoked, then assigned again (a member joined and left)."""
        everything = [TopicPartition(TOPIC, p) for p in range(self.client.kafka.partitions)]
        self.runtime.partitions.on_revoke(self.client, everything)
        self.client.incremental_unassign(everything)
        self.runtime.partitions.on_assign(self.client, everything)


def _runtime(app: App, config: ConsumerConfig, client: "redis.Redis", kafka: KafkaModel, **kw: object) -> ConsumerRuntime:
    runtime = ConsumerRuntime(app, config, redis_client=client, install_signals=False, **kw)  # type: ignore[arg-type]
    producer, admin = kafka.dead_letter_clients()
    runtime.pipeline.dead_letters = DeadLetters(config.kafka_bootstrap, config.group, producer=producer, admin=admin)  # type: ignore[arg-type]
    runtime.engine.load()
    return runtime


def _attach(runtime: ConsumerRuntime, consumer: ModelClient) -> None:
    consumer.on_commit = runtime.partitions.on_commit
    consumer.after_consume = runtime.stop
    runtime.consumer = runtime.partitions.consumer = consumer


def group_member(name: str, app: App, config: ConsumerConfig, client: "redis.Redis", kafka: KafkaModel, rng: random.Random) -> Process:
    """A member of ``config.group`` that is assigned every partition (from the committed offsets)."""
    runtime = _runtime(app, config, client, kafka)
    consumer = ModelClient(kafka, rng)
    _attach(runtime, consumer)
    runtime.partitions.on_assign(consumer, [TopicPartition(TOPIC, p) for p in range(kafka.partitions)])
    return Process(name, runtime, consumer)


def window_run(name: str, app: App, config: ConsumerConfig, client: "redis.Redis", kafka: KafkaModel, rng: random.Random,
               spans: list[Span]) -> Process:
    """``postbox consume --from --until`` over ``spans`` beside ``config.group``."""
    assignment = WindowAssignment(spans)
    runtime = _runtime(app, config, client, kafka, assignment=assignment)
    consumer = WindowClient(kafka, rng, eof=True)
    consumer.tallies, consumer.watch = assignment.tallies, assignment.watch
    _attach(runtime, consumer)
    assignment.start(consumer, [TOPIC], runtime.partitions)
    return Process(name, runtime, consumer)


__all__ = ["Process", "WindowClient", "group_member", "window_run"]
