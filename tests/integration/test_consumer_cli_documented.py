"""Documented behaviours of `postbox consume` that had no test (issue 18): `--check`, exit 1 on a bad
configuration, and a second signal stopping at once."""

from __future__ import annotations

import json
import signal
import uuid

import pytest

from postbox.consumer import ConsumerConfig
from tests.apps import documented
from tests.integration.incident_support import run_cli
from tests.support.consumers import ConsumerProcess, ThreadedRuntime, committed, create_topic, json_event, produce, wait_for

pytestmark = pytest.mark.integration
NO_COMMIT = -1001


def test_check_validates_prints_the_configuration_and_consumes_nothing(settings, unique):
    """docs/consumer.md, Running: `postbox consume consumers.billing:app --check` — "validate and
    print the configuration" (and exit 0); each value's source follows the documented precedence
    (flag, then variable, then the App's default); the Redis password is not printed; nothing is
    consumed or committed."""
    topic, group = f"outbox.event.chk{unique}", f"test-chk-{unique}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    produce(settings.kafka_bootstrap, topic, [json_event(f"chk{unique}", "a1", "Counted", 0, partition=0)])
    done = run_cli("consume", "tests.apps.documented:app", "--check", "--group", group, "--topics", topic, "--batch-size", "7",
                   env={"POSTBOX_HANDLER_RETRIES": "5", "POSTBOX_BATCH_SIZE": "9"})
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["app"] == "tests.apps.documented:app"
    assert "*/Counted -> counted" in data["handlers"] and "*/Invalid -> invalid" in data["handlers"]
    config, sources = data["config"], data["sources"]
    assert config["group"] == group and config["topics"] == [topic]
    assert config["batch_size"] == 7 and sources["batch_size"] == "--batch-size"  # the flag beats the variable
    assert config["handler_retries"] == 5 and sources["handler_retries"] == "POSTBOX_HANDLER_RETRIES"
    assert config["batch_wait_ms"] == 5 and "batch_wait_ms" not in sources  # built-in default
    password = settings.redis_url.split("@")[0].rsplit(":", 1)[-1]
    assert password not in done.stdout and "***" in config["redis_url"]
    assert committed(settings.kafka_bootstrap, group, topic, 1) == {0: NO_COMMIT}


@pytest.mark.parametrize(("args", "env", "named"), [
    ([], {"POSTBOX_BATCH_SIZE": "lots"}, "POSTBOX_BATCH_SIZE='lots': expected a whole number"),
    (["--check", "--auto-offset-reset", "sideways"], {}, "--auto-offset-reset"),
])
def test_bad_configuration_exits_1_naming_the_setting_and_the_fix(args, env, named):
    """docs/consumer.md, Shutdown: "Exit code 1: a configuration error, printed as one line plus the
    fix"; Configuration: "a bad one stops the consumer with a message naming the variable or flag
    (`POSTBOX_BATCH_SIZE='lots': expected a whole number`)". `--check` refuses it too."""
    done = run_cli("consume", "tests.apps.documented:app", "--group", "test-never-runs", "--topics", "outbox.event.never-consumed", *args, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines[0].startswith("error:") and named in lines[0], done.stderr
    assert len(lines) == 2 and lines[1].strip().startswith("fix:"), done.stderr


def test_a_second_signal_stops_at_once_and_the_batch_is_redelivered(settings, redis_client, unique, tmp_path, monkeypatch):
    """docs/consumer.md, Shutdown: "SIGTERM or SIGINT: the current batch finishes ... A second signal
    stops at once (uncommitted work is redelivered and deduplicated)". Handlers sleep 2 s per event
    in a batch of 20: after the first SIGTERM the consumer keeps finishing the batch; the second
    ends it without a commit (exit 130, as after Ctrl-C); a new member applies all 20 once. The
    first signal is sent once a handler has printed that it started (the batch is in flight)."""
    agg = f"sig{unique}"
    topic, group = f"outbox.event.{agg}", f"test-sig-{unique}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    produce(settings.kafka_bootstrap, topic, [json_event(agg, "a1", "Slow", i, partition=0, event_id=str(uuid.uuid4())) for i in range(20)])
    env = {"POSTBOX_TEST_SLOW_S": "2", "POSTBOX_REDIS_URL": settings.redis_url, "POSTBOX_KAFKA_BOOTSTRAP": settings.kafka_bootstrap}
    proc = ConsumerProcess("tests.apps.documented:app", env, tmp_path / "consumer.log",
                           ["--group", group, "--topics", topic, "--batch-wait-ms", "1000", "--session-timeout-ms", "6000"])
    try:
        wait_for(lambda: "slow handler started" in proc.output(), 60, "the first batch inside its handlers")
        proc.process.send_signal(signal.SIGTERM)
        wait_for(lambda: "signal received" in proc.output(), 15, "the first signal to be logged")
        assert proc.alive(), "the first signal must let the batch finish"
        proc.process.send_signal(signal.SIGTERM)
        code = proc.process.wait(timeout=15)
    finally:
        proc.close()
    assert code == 130, proc.output()
    assert committed(settings.kafka_bootstrap, group, topic, 1) == {0: NO_COMMIT}
    assert redis_client.llen(f"{{{agg}:a1}}:seq") == 0, "the batch never reached Redis"

    monkeypatch.setenv("POSTBOX_TEST_SLOW_S", "0")  # the redelivered batch runs in this process
    runtime = ThreadedRuntime(documented.app, ConsumerConfig.load(group=group, topics=topic, batch_wait_ms=20)).start()
    try:
        wait_for(lambda: runtime.ok() and committed(settings.kafka_bootstrap, group, topic, 1) == {0: 20}, 60, "20 committed")
    finally:
        runtime.stop()
    assert [int(x) for x in redis_client.lrange(f"{{{agg}:a1}}:seq", 0, -1)] == list(range(20))
    redis_client.delete(f"{{{agg}:a1}}:seq", f"{{{agg}:a1}}:count")
