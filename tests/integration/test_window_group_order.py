"""A window run beside its group keeps each aggregate's order, or is refused without --force.

Found in review: `postbox consume --from --until` started ahead of a lagging group applied later
events of an aggregate before the group applied the earlier ones. Before the rule the first
window here ran and the aggregate ended out of order; the window beside the live group, starting
behind it and ending past it, was refused (it is safe: both apply in order, each meets the other's
markers). Driven as subprocesses against the stack, on records produced by kafka-python.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from tests.support.consumers import ROOT, ConsumerProcess, commit_offset, committed, create_topic, wait_for
from tests.support.independent import produce_events_at

pytestmark = pytest.mark.integration

APP = "tests.apps.counting:audited"


def _topic(settings, agg: str, count: int) -> tuple[str, list[str]]:
    """A one-partition topic of ``count`` events: offset i is seq i of aggregate ``a<i % 4>``."""
    topic = f"outbox.event.{agg}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    now = int(time.time() * 1000) - 600_000
    return topic, produce_events_at(settings.kafka_bootstrap, topic, agg, [(0, now + i) for i in range(count)])


def _env(settings, **extra: str) -> dict[str, str]:
    return {"POSTBOX_REDIS_URL": settings.redis_url, "POSTBOX_KAFKA_BOOTSTRAP": settings.kafka_bootstrap, **extra}


def _window(settings, group: str, topic: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "postbox", "consume", APP, "--group", group, "--topics", topic, *args],
                          cwd=ROOT, env={**os.environ, **_env(settings)}, capture_output=True, text=True, timeout=180)  # fmt: skip


def _orders(redis_client, agg: str) -> dict[int, list[int]]:
    """Per aggregate a0..a3, the seqs in the order applied."""
    return {i: [int(s) for s in redis_client.lrange(f"{{{agg}:a{i}}}:seq", 0, -1)] for i in range(4)}


def _run_group(settings, group: str, topic: str, count: int, log_path, **env: str) -> None:
    """The group's consumer, until it has committed every record, then stopped."""
    live = ConsumerProcess(APP, _env(settings, **env), log_path, ["--group", group, "--topics", topic, "--batch-size", "2"])
    try:
        wait_for(lambda: committed(settings.kafka_bootstrap, group, topic, 1)[0] == count, 90, "the group done")
        assert live.terminate() == 0, live.output()
    finally:
        live.close()


def test_a_window_ahead_of_a_lagging_group_is_refused_and_forced_it_reorders_the_aggregate(settings, redis_client, unique, tmp_path):
    agg = f"wgo{unique}"
    group = f"test-wgo-{unique}"
    topic, _ = _topic(settings, agg, 12)
    commit_offset(settings.kafka_bootstrap, group, topic, 4)  # the group is at 4 (stopped, lagging): 4 and 5 not applied

    refused = _window(settings, group, topic, "--from", "6", "--until", "end")
    assert refused.returncode == 1, refused.stderr[-3000:]
    error = " ".join(refused.stderr.split())
    assert f"refused to run the window of group {group}: it starts ahead of the group on 1 partition(s)" in error
    assert f"{topic}[0]: the window starts at offset 6, ahead of the group's committed offset 4" in error
    assert "offsets 4..5 (2 record(s))" in error
    assert "start the group and wait for it to catch up" in error and "--from committed" in error and "--force" in error
    assert _orders(redis_client, agg) == {0: [], 1: [], 2: [], 3: []}  # nothing applied

    forced = _window(settings, group, topic, "--from", "6", "--until", "end", "--force")
    assert forced.returncode == 0, forced.stderr[-3000:]
    assert "window forced ahead of its group" in forced.stderr and f"{topic}[0]@6>4" in forced.stderr
    assert f"{topic}[0] offsets 6..11: applied 6, duplicate 0, dead-lettered 0" in forced.stdout
    # what the refusal prevents: the group resumes at 4 and applies seq 4 and 5 after 8 and 9
    _run_group(settings, group, topic, 12, tmp_path / "group.log")
    assert _orders(redis_client, agg) == {0: [8, 4], 1: [9, 5], 2: [6, 10], 3: [7, 11]}


def test_a_window_from_behind_the_live_group_to_past_it_runs_and_keeps_every_aggregates_order(settings, redis_client, unique, tmp_path):
    agg = f"wgb{unique}"
    group = f"test-wgb-{unique}"
    count = 60
    topic, sent = _topic(settings, agg, count)
    # the live group is slow (200 ms an event, ~12 s in all): the window starts behind it and ends past it
    live = ConsumerProcess(APP, _env(settings, POSTBOX_TEST_SLEEP_MS="200"), tmp_path / "live.log",
                           ["--group", group, "--topics", topic, "--batch-size", "2"])  # fmt: skip
    try:
        wait_for(lambda: committed(settings.kafka_bootstrap, group, topic, 1)[0] >= 6, 90, "the live group under way")
        window = _window(settings, group, topic, "--from", "2", "--until", "end", "--batch-size", "4")
        live_progress = committed(settings.kafka_bootstrap, group, topic, 1)[0]
        assert window.returncode == 0, window.stderr[-3000:]  # no --force: it starts behind the group
        assert "refused" not in window.stderr and "forced" not in window.stderr
        wait_for(lambda: committed(settings.kafka_bootstrap, group, topic, 1)[0] == count, 90, "the live group done")
        assert live.terminate() == 0, live.output()
    finally:
        live.close()
    assert live_progress < count, "the live group finished before the window did: they did not overlap"
    line = next(x for x in window.stdout.splitlines() if x.startswith(f"{topic}[0]"))
    applied, duplicate = (int(line.split(f"{name} ")[1].split(",")[0]) for name in ("applied", "duplicate"))
    assert applied + duplicate == count - 2 and duplicate >= 4 and applied > 0  # it met the group's markers, and got ahead
    orders = _orders(redis_client, agg)
    assert orders == {i: list(range(i, count, 4)) for i in range(4)}  # every event once, each aggregate in order
    assert len(sent) == count
