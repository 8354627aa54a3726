"""The runtime's per-batch DEBUG line: the counts the fault suite sums across SIGKILLed processes."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import redis

from postbox.consumer import App, ConsumerConfig, ConsumerRuntime
from postbox.consumer.blocks import Block, Blocks
from postbox.consumer.deadletter import Failure
from postbox.consumer import pipeline
from postbox.consumer.partition_state import PartitionState
from postbox.consumer.logs import JsonFormatter
from postbox.effects import ApplyResult
from postbox.effects.engine import Outcome
from postbox.errors import TransientEffectError
from tests.support.kafka import StandInRecord


def test_batch_line_counts_applied_duplicates_failed_and_retried(caplog):
    item = lambda offset, failure=None: SimpleNamespace(tp=("t", 0), offset=offset, failure=failure)  # noqa: E731
    items = [item(0), item(1), item(2, Failure("DecodeError", "bad")), item(3), item(4)]
    results = [Outcome.APPLIED, ApplyResult("e1", Outcome.DUPLICATE)]  # the engine's verdicts: an outcome, or a full result
    with caplog.at_level(logging.DEBUG, logger="postbox.consumer"):
        pipeline.log_batch(items, results, Blocks({("t", 0): Block(3, "connection", "down")}))  # type: ignore[arg-type]  # stand-in items with the fields it reads
    [record] = [r for r in caplog.records if r.getMessage() == "batch finished"]
    data = json.loads(JsonFormatter().format(record))
    assert (data["records"], data["applied"], data["duplicates"], data["failed"], data["retried"]) == (5, 1, 1, 1, 2)
    assert data["partitions"] == "t[0]"


def _runtime_with_one_partition() -> ConsumerRuntime:
    """A runtime whose handler fails transiently: a batch runs decode, handler, block and pause
    without Redis or Kafka (the pause goes to a stand-in consumer)."""
    app = App("g")

    @app.catch_all
    def unavailable(event, fx):
        raise TransientEffectError("the handler's dependency is down", reason="handler")

    config = ConsumerConfig.load({}, group="g", topics="t", redis_url="redis://127.0.0.1:1/0", kafka_bootstrap="127.0.0.1:1")
    runtime = ConsumerRuntime(app, config, redis_client=redis.Redis(port=1), install_signals=False)
    runtime.partitions.consumer = SimpleNamespace(pause=lambda partitions: None)  # type: ignore[assignment]  # a stand-in: only pause is called
    runtime.states[("t", 0)] = PartitionState("t", 0)
    return runtime


def _batches_logged(level: int, monkeypatch, caplog) -> list[tuple]:
    runtime = _runtime_with_one_partition()
    calls: list[tuple] = []
    real = pipeline.log_batch
    monkeypatch.setattr(pipeline, "log_batch", lambda *a: (calls.append(a), real(*a)))
    with caplog.at_level(level, logger="postbox.consumer"):
        prepared = runtime.pipeline.prepare([StandInRecord(0), StandInRecord(1)])  # type: ignore[list-item]  # stand-in records
        assert prepared is not None
        runtime.pipeline.launch(prepared)
        assert runtime.pipeline.settle()
    assert runtime.states[("t", 0)].paused  # the batch really ran to its end
    return calls


def test_a_batch_logs_its_line_at_debug(monkeypatch, caplog):
    assert len(_batches_logged(logging.DEBUG, monkeypatch, caplog)) == 1
    [record] = [r for r in caplog.records if r.getMessage() == "batch finished"]
    data = json.loads(JsonFormatter().format(record))
    assert (data["records"], data["retried"]) == (2, 2)


def test_the_batch_line_is_not_built_above_debug(monkeypatch, caplog):
    """Counting a batch's outcomes costs a pass over it: at INFO it must not run at all.
    Shown to fail: with the ``log.isEnabledFor(logging.DEBUG)`` guard removed from
    ``Pipeline.settle`` (scratch edit, not committed), ``_log_batch`` ran once here."""
    assert _batches_logged(logging.INFO, monkeypatch, caplog) == []
    assert not [r for r in caplog.records if r.getMessage() == "batch finished"]
