"""#14.3 static group membership of `postbox consume`, on the real broker.

- Two processes given the same instance id: the broker fences the older one, which rejoins once
  (what answers a fence after a coordinator restart, postbox.consumer.fencing), fences the newer
  one, is fenced again and stops with a configuration error naming the instance id and the fix;
  the newer one keeps running (never two members reading one partition).
- A static member stopped with SIGTERM leaves the group: with a 60 s session timeout, the remaining
  member gets every partition (at its next heartbeats) while the departed member's session would
  still be live
  (librdkafka's close alone sends no LeaveGroup for a static member: shown to fail when the
  runtime called ``close()`` right after ``unsubscribe()``, before the revoke was served — close
  then suppressed the LeaveGroup and the wait ran into its 40 s limit).
"""

from __future__ import annotations

import re

import pytest

from tests.support.consumers import ConsumerProcess, create_topic, wait_for

pytestmark = pytest.mark.integration


def _env(settings, group: str, topic: str, **extra: str) -> dict[str, str]:
    return {"POSTBOX_GROUP": group, "POSTBOX_TOPICS": topic, "POSTBOX_REDIS_URL": settings.redis_url,
            "POSTBOX_KAFKA_BOOTSTRAP": settings.kafka_bootstrap, **extra}  # fmt: skip


def _assigned(process: ConsumerProcess) -> set[str]:
    """Partitions the process holds now, from its 'partitions assigned/revoked' log lines."""
    held: set[str] = set()
    for line in process.output().splitlines():
        match = re.search(r"partitions (assigned|revoked)\s.*?partitions=(\S+)", line)
        if match:
            parts = {p for p in match.group(2).strip('"').split(",") if p}
            held = held | parts if match.group(1) == "assigned" else held - parts
    return held


def test_a_second_process_with_the_same_instance_id_fences_the_first_which_rejoins_once_then_stops_with_the_fix(settings, unique, tmp_path):
    topic = f"outbox.event.stat{unique}"
    create_topic(settings.kafka_bootstrap, topic, 2)
    env = _env(settings, f"test-static-{unique}", topic, POSTBOX_INSTANCE_ID=f"same-{unique}")
    first = ConsumerProcess("tests.apps.counting:app", env, tmp_path / "first.log")
    second = None
    try:
        wait_for(lambda: "partitions assigned" in first.output(), 60, "the first member to get partitions")
        second = ConsumerProcess("tests.apps.counting:app", env, tmp_path / "second.log")
        wait_for(lambda: not first.alive(), 60, "the fenced first member to stop")
        assert first.process.returncode == 3, first.output()
        assert f"same-{unique}" in first.output() and "--instance-id" in first.output(), first.output()
        assert "rejoining with a new client under the same instance id" in first.output(), first.output()
        assert second.alive(), second.output()
    finally:
        first.close()
        if second is not None:
            second.close()


def test_a_static_member_stopped_with_sigterm_hands_its_partitions_over_before_its_session_expires(settings, unique, tmp_path):
    topic = f"outbox.event.stal{unique}"
    create_topic(settings.kafka_bootstrap, topic, 4)
    env = _env(settings, f"test-static-leave-{unique}", topic, POSTBOX_SESSION_TIMEOUT_MS="60000")
    procs = [ConsumerProcess("tests.apps.counting:app", env, tmp_path / f"c{i}.log") for i in range(2)]
    try:
        wait_for(lambda: all(_assigned(p) for p in procs), 90, "both members to hold partitions")
        assert len(_assigned(procs[0]) | _assigned(procs[1])) == 4
        assert procs[0].terminate() == 0
        wait_for(lambda: len(_assigned(procs[1])) == 4, 40, "the remaining member to get every partition (well inside the 60 s session)")
    finally:
        for p in procs:
            p.close()
