"""#16.2 lifecycle hooks of a real `postbox consume` process: start-up hooks once and in order
before the first event, their resources in the handler, shutdown hooks once and in reverse order on
SIGTERM; a failing start-up hook exits 1 naming the hook and its error, and closes only what the
hooks before it opened."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.support.consumers import ConsumerProcess, committed, create_topic, json_event, produce, wait_for

pytestmark = pytest.mark.integration

EVENTS = 12


def test_hooks_run_once_in_order_and_shutdown_runs_on_sigterm(settings, redis_client, unique, tmp_path):
    agg = f"life{unique}"
    topic = f"outbox.event.{agg}"
    group = f"test-life-{unique}"
    create_topic(settings.kafka_bootstrap, topic, 2)
    produce(settings.kafka_bootstrap, topic, [json_event(agg, f"a{i % 3}", "Counted", i, event_id=str(uuid.uuid4())) for i in range(EVENTS)])
    hooks = tmp_path / "hooks.log"
    env = {"POSTBOX_REDIS_URL": settings.redis_url, "POSTBOX_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
           "POSTBOX_TEST_HOOK_LOG": str(hooks)}
    proc = ConsumerProcess("tests.apps.lifecycle:app", env, tmp_path / "life.log", ["--group", group, "--topics", topic])
    try:
        try:
            wait_for(lambda: proc.alive() and sum(max(0, o) for o in committed(settings.kafka_bootstrap, group, topic, 2).values()) == EVENTS, 60,
                     f"{EVENTS} committed")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; consumer output:\n{proc.output()}") from None
        assert hooks.read_text().splitlines() == ["startup journal", "startup tally"]  # nothing closed while running
        assert proc.terminate() == 0, proc.output()
    finally:
        proc.close()
    assert hooks.read_text().splitlines() == [
        "startup journal", "startup tally", f"shutdown tally calls={EVENTS}", "shutdown journal ['tally opened']",
    ], proc.output()
    redis_client.delete(*[f"{{{agg}:a{i}}}:count" for i in range(3)])


def test_a_failing_startup_hook_exits_1_with_its_name_and_error(settings, unique, tmp_path):
    hooks = tmp_path / "hooks.log"
    env = {"POSTBOX_REDIS_URL": settings.redis_url, "POSTBOX_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
           "POSTBOX_TEST_HOOK_LOG": str(hooks), "POSTBOX_TEST_FAIL_HOOK": "tally"}
    proc = ConsumerProcess("tests.apps.lifecycle:app", env, tmp_path / "fail.log",
                           ["--group", f"test-life-fail-{unique}", "--topics", f"outbox.event.life{unique}"])
    try:
        code = proc.process.wait(timeout=60)
        output = proc.output()
    finally:
        proc.close()
    assert code == 1, output
    assert "start-up hook tally failed: RuntimeError: tally store unreachable" in output
    assert "Traceback" not in output
    assert hooks.read_text().splitlines() == ["startup journal", "shutdown journal []"]


def test_check_lists_the_hooks_without_running_them(settings, tmp_path, monkeypatch):
    from tests.support.cli import invoke

    hooks = tmp_path / "hooks.log"
    monkeypatch.setenv("POSTBOX_TEST_HOOK_LOG", str(hooks))
    code, out = invoke("consume", "tests.apps.lifecycle:app", "--check", "--group", "test-life-check", "--topics", "outbox.event.life")
    assert code == 0
    assert json.loads(out)["hooks"] == {"startup": ["journal", "tally"], "shutdown": ["close_journal", "close_tally"]}
    assert not hooks.exists()  # --check validates; it opens nothing
