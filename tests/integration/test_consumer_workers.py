"""`postbox consume --workers 2` on the real stack: two group members under one supervisor share
the partitions; a SIGKILLed worker is restarted and nothing is lost or applied twice; SIGTERM to
the supervisor makes every worker commit and exit 0, and the supervisor exits 0."""

from __future__ import annotations

import signal
import subprocess
import uuid

import pytest

from tests.support.consumers import ConsumerProcess, committed, create_topic, json_event, produce, wait_for

pytestmark = pytest.mark.integration

PARTITIONS, AGGREGATES = 4, 8


def _workers(supervisor: int) -> list[int]:
    """The pids of the supervisor's worker processes (its children)."""
    done = subprocess.run(["pgrep", "-P", str(supervisor)], capture_output=True, text=True)
    return sorted(int(pid) for pid in done.stdout.split())


def _events(agg: str, start: int, count: int) -> list:
    return [json_event(agg, f"a{seq % AGGREGATES}", "Counted", seq, event_id=str(uuid.uuid4())) for seq in range(start, start + count)]


def test_two_workers_survive_a_killed_worker_and_stop_cleanly(settings, unique, redis_client, tmp_path):
    agg, group = f"workers{unique}", f"test-workers-{unique}"
    topic = f"outbox.event.{agg}"
    create_topic(settings.kafka_bootstrap, topic, PARTITIONS)
    produce(settings.kafka_bootstrap, topic, _events(agg, 0, 200))
    env = {"POSTBOX_REDIS_URL": settings.redis_url, "POSTBOX_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
           "POSTBOX_SESSION_TIMEOUT_MS": "6000"}  # fmt: skip
    log = tmp_path / "workers.log"
    proc = ConsumerProcess("tests.apps.counting:app", env, log, ["--group", group, "--topics", topic, "--workers", "2"])
    total = lambda: sum(v for v in committed(settings.kafka_bootstrap, group, topic, PARTITIONS).values() if v > 0)  # noqa: E731
    try:
        wait_for(lambda: proc.alive() and total() == 200, 90, f"200 committed; log: {log}")
        before = _workers(proc.process.pid)
        assert len(before) == 2, proc.output()

        victim = before[0]
        subprocess.run(["kill", "-KILL", str(victim)], check=True)
        wait_for(lambda: len(_workers(proc.process.pid)) == 2 and victim not in _workers(proc.process.pid), 60,
                 f"the killed worker restarted; log: {log}")  # fmt: skip
        produce(settings.kafka_bootstrap, topic, _events(agg, 200, 200))
        wait_for(lambda: proc.alive() and total() == 400, 120, f"400 committed; log: {log}")

        proc.process.send_signal(signal.SIGTERM)
        assert proc.process.wait(timeout=60) == 0, proc.output()
    finally:
        proc.close()

    seen = []
    for i in range(AGGREGATES):
        seqs = [int(s) for s in redis_client.lrange(f"{{{agg}:a{i}}}:seq", 0, -1)]
        assert seqs == sorted(seqs), f"a{i} applied out of order: {seqs}"
        seen += seqs
    assert sorted(seen) == list(range(400))  # each event applied exactly once: none lost, none twice
    text = log.read_text()
    assert "worker exited: restarting it" in text, text[-3000:]
    after_term = text.split("signal received: forwarding it to every worker", 1)[1]
    assert after_term.count("worker stopped") == 2, after_term  # both workers, each a clean stop (exit 0 above)
