"""The "partitions assigned" line is what on-call and the fault suite wait for after a restart: it
must mean partitions were added. The cooperative protocol also calls on_assign with an empty list on
every rebalance (a member that gets nothing new); that call must not print the line."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import TopicPartition

from postbox.consumer.backoff import Backoff
from postbox.consumer.metrics import Metrics
from postbox.consumer.partitions import Partitions


class _AssignOnly:
    """The two calls on_assign makes on the Kafka client, recorded (no broker needed for them)."""

    def __init__(self) -> None:
        self.assigned: list[TopicPartition] = []

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned += partitions

    def resume(self, partitions: list[TopicPartition]) -> None:
        pass


def _assigned_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "partitions assigned" in r.getMessage()]


def test_an_empty_assignment_prints_no_assigned_line(caplog: pytest.LogCaptureFixture) -> None:
    book = Partitions("g", Metrics("g"), Backoff())
    client = _AssignOnly()
    postbox_logger = logging.getLogger("postbox")
    propagates = postbox_logger.propagate
    postbox_logger.propagate = True  # configure() may have turned it off; caplog listens at the root
    try:
        with caplog.at_level(logging.INFO):
            book.on_assign(client, [])  # type: ignore[arg-type]  # the two methods on_assign calls
            assert _assigned_lines(caplog) == []
            book.on_assign(client, [TopicPartition("outbox.event.order", 3)])  # type: ignore[arg-type]  # as above
    finally:
        postbox_logger.propagate = propagates
    assert len(_assigned_lines(caplog)) == 1
    assert set(book.states) == {("outbox.event.order", 3)}
