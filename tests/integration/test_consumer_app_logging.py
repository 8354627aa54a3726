"""An app that configures logging itself keeps it under `postbox consume`.

A real `postbox consume` of tests/apps/file_logging.py, whose module installs a file handler on the
root logger at import. postbox used to remove every root handler after importing the app: the file
stayed empty and every line went to stderr. Now the app's handler gets postbox's lines and the
handler's own, each with the event's fields as record attributes; postbox's stderr handler is added
only on request (``--log-stderr always``) when the app has one.
"""

from __future__ import annotations

import json
import uuid

import pytest

from tests.support.consumers import ConsumerProcess, committed, create_topic, json_event, produce, wait_for

pytestmark = pytest.mark.integration


def _consume(settings, unique: str, tmp_path, *args: str) -> tuple[list[str], list[str], dict[int, str]]:
    """Run the app over three events; (the app's file lines, the process's own output lines, ids)."""
    agg = f"applog{unique}"
    topic = f"outbox.event.{agg}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    records = [json_event(agg, "a1", "Counted", i, event_id=str(uuid.uuid4()), partition=0) for i in range(3)]
    produce(settings.kafka_bootstrap, topic, records)
    group = f"test-applog-{unique}"
    app_log, stderr_log = tmp_path / "app.log", tmp_path / "stderr.log"
    env = {"POSTBOX_REDIS_URL": settings.redis_url, "POSTBOX_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
           "POSTBOX_TEST_APP_LOG": str(app_log)}
    proc = ConsumerProcess("tests.apps.file_logging:app", env, stderr_log, ["--group", group, "--topics", topic, *args])
    try:
        wait_for(lambda: proc.alive() and committed(settings.kafka_bootstrap, group, topic, 1)[0] == 3, 60, "3 committed")
        assert proc.terminate() == 0
    finally:
        proc.close()
    ids = {seq: r[2][0][1].decode() for seq, r in enumerate(records)}
    return app_log.read_text().splitlines(), stderr_log.read_text().splitlines(), ids


def test_the_apps_file_handler_gets_every_line_with_the_event(settings, unique, tmp_path):
    lines, stderr, ids = _consume(settings, unique, tmp_path)
    handled = [line for line in lines if line.startswith("INFO shop.file_logging_test: handled seq")]
    assert handled == [f"INFO shop.file_logging_test: handled seq {seq} event_id={ids[seq]}" for seq in range(3)]
    assert any("consumer subscribed" in line and line.endswith("event_id=-") for line in lines), lines
    assert not any("consumer subscribed" in line or "handled seq" in line for line in stderr), stderr


def test_log_stderr_always_adds_postboxs_json_lines_beside_the_apps(settings, unique, tmp_path):
    lines, stderr, ids = _consume(settings, unique, tmp_path, "--log-stderr", "always", "--log-format", "json")
    assert sum("handled seq" in line for line in lines) == 3
    records = [json.loads(line) for line in stderr if line.startswith("{")]
    handled = [r for r in records if r["logger"] == "shop.file_logging_test"]
    assert [r["event_id"] for r in handled] == [ids[seq] for seq in range(3)]
    assert any(r["msg"] == "consumer subscribed" for r in records)
