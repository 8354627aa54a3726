"""The runtime's per-batch DEBUG line: the counts the fault suite sums across SIGKILLed processes."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import redis

from postbox.consumer import App, ConsumerConfig, ConsumerRuntime
from postbox.consumer.deadletter import Failure
from postbox.consumer.logs import JsonFormatter


def test_batch_line_counts_applied_duplicates_failed_and_retried(caplog):
    app = App("g")
    app.catch_all(lambda e, fx: None)
    config = ConsumerConfig.load({}, group="g", topics="t", redis_url="redis://127.0.0.1:1/0", kafka_bootstrap="127.0.0.1:1")
    runtime = ConsumerRuntime(app, config, redis_client=redis.Redis(port=1), install_signals=False)
    item = lambda offset, failure=None: SimpleNamespace(tp=("t", 0), offset=offset, failure=failure)  # noqa: E731
    items = [item(0), item(1), item(2, Failure("DecodeError", "bad")), item(3), item(4)]
    results = [SimpleNamespace(applied=True, duplicate=False), SimpleNamespace(applied=False, duplicate=True)]
    with caplog.at_level(logging.DEBUG, logger="postbox.consumer"):
        runtime._log_batch(items, results, {("t", 0): (3, "connection", "down")})
    [record] = [r for r in caplog.records if r.getMessage() == "batch finished"]
    data = json.loads(JsonFormatter().format(record))
    assert (data["records"], data["applied"], data["duplicates"], data["failed"], data["retried"]) == (5, 1, 1, 1, 2)
    assert data["partitions"] == "t[0]"


def test_batch_line_is_not_built_above_debug(caplog):
    logger = logging.getLogger("postbox.consumer")
    with caplog.at_level(logging.INFO, logger="postbox.consumer"):
        assert not logger.isEnabledFor(logging.DEBUG)  # _process skips _log_batch entirely
