"""How a consumer runtime gets its partitions: the one seam between the loop and where its records
come from.

The loop (:mod:`postbox.consumer.runtime`) is the same for every way of getting partitions; what
differs is kept behind :class:`Assignment`:

- :class:`GroupMembership` (the default, ``postbox consume``): join the consumer group, subscribe,
  get partitions from rebalances, commit offsets, run until stopped.
- :class:`postbox.consumer.window.WindowAssignment` (``postbox consume --from --until``): assign
  partitions explicitly (no group membership, no rebalance), read each from a start to an end
  offset, never commit, and finish when every partition reached its end.

A strategy object rather than branches in the loop, so the loop stays one loop.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from confluent_kafka import Consumer

from postbox.consumer.backoff import Backoff
from postbox.consumer.logs import log_event
from postbox.consumer.metrics import Metrics
from postbox.consumer.partitions import Partitions

log = logging.getLogger("postbox.consumer")


class Assignment(Protocol):
    """Where a runtime's partitions come from, and when its loop is done."""

    #: What a first SIGTERM/SIGINT makes the runtime do, as its log line says it.
    on_signal: str

    def partitions(self, group: str, metrics: Metrics, backoff: Backoff) -> Partitions:
        """The partition book-keeping the runtime uses (pause/seek, commits, rebalance callbacks)."""
        ...

    def configure(self, conf: dict[str, Any]) -> dict[str, Any]:
        """The Kafka consumer's librdkafka configuration, adjusted for this way of assigning."""
        ...

    def client(self, conf: dict[str, Any]) -> Consumer:
        """A Kafka consumer made from ``conf`` (``kafka_config.open_client`` calls it)."""
        ...

    def start(self, consumer: Consumer, topics: list[str], partitions: Partitions) -> None:
        """Begin receiving records (subscribe, or assign)."""
        ...

    def finished(self) -> bool:
        """True when the loop has nothing more to do (never, for a group member)."""
        ...


class GroupMembership:
    """A member of the consumer group: subscribe with the rebalance callbacks of ``partitions``,
    commit, run until stopped."""

    on_signal = "finishing the batch, committing, leaving the group"

    def partitions(self, group: str, metrics: Metrics, backoff: Backoff) -> Partitions:
        return Partitions(group, metrics, backoff)

    def configure(self, conf: dict[str, Any]) -> dict[str, Any]:
        return conf

    def client(self, conf: dict[str, Any]) -> Consumer:
        return Consumer(conf)

    def start(self, consumer: Consumer, topics: list[str], partitions: Partitions) -> None:
        consumer.subscribe(topics, on_assign=partitions.on_assign, on_revoke=partitions.on_revoke,
                           on_lost=partitions.on_lost)  # fmt: skip
        log_event(log, logging.INFO, "consumer subscribed", group=partitions.group, topics=",".join(topics))

    def finished(self) -> bool:
        return False


__all__ = ["Assignment", "GroupMembership"]
