"""#15.1 time windows: `postbox consume MODULE:APP --from SPEC --until SPEC`, a bounded run that
applies a slice of history through the group's markers and never commits, driven as a subprocess
against the stack, on records produced by kafka-python (an independent client)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import datetime, timezone

import pytest
from tests.support.consumers import ROOT, ConsumerProcess, committed, create_topic, wait_for
from tests.support.independent import produce_events_at

pytestmark = pytest.mark.integration

APP = "tests.apps.counting:audited"
#: The same facts under other keys, in another order: a later deploy of the handler (#12.1).
APP_CHANGED = "tests.apps.counting:audited_v2"


def _produce_timed(bootstrap: str, topic: str, agg: str, count: int, base_ms: int) -> list[tuple[str, int, int]]:
    """``count`` events with kafka-python, event i at ``base_ms + i s`` on partition i % 2; returns
    (event id, partition, timestamp) per event."""
    placed = [(i % 2, base_ms + i * 1000) for i in range(count)]
    return [(eid, p, ts) for eid, (p, ts) in zip(produce_events_at(bootstrap, topic, agg, placed), placed)]


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _consume(settings, app: str, group: str, topic: str, *args: str, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "POSTBOX_REDIS_URL": settings.redis_url, "POSTBOX_KAFKA_BOOTSTRAP": settings.kafka_bootstrap, **(extra_env or {})}
    return subprocess.run([sys.executable, "-m", "postbox", "consume", app, "--group", group, "--topics", topic, *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)  # fmt: skip


def _applied(redis_client, agg: str) -> dict[str, int]:
    """event id → times applied, over the four aggregates (the handlers' per-event counter)."""
    out: dict[str, int] = {}
    for i in range(4):
        for eid, n in redis_client.hgetall(f"{{{agg}:a{i}}}:applied").items():
            out[eid.decode()] = int(n)
    return out


def _summary(stdout: str, topic: str) -> dict[int, str]:
    return {int(line.split("[", 1)[1].split("]", 1)[0]): line for line in stdout.splitlines() if line.startswith(topic + "[")}


def _totals(stdout: str, topic: str) -> dict[str, int]:
    """The summary's applied and duplicate counts summed over the partitions."""
    totals = {"applied": 0, "duplicate": 0}
    for line in _summary(stdout, topic).values():
        for name in totals:
            totals[name] += int(line.split(f"{name} ")[1].split(",")[0])
    return totals


def _slow_topic(settings, name: str, count: int, sleep_ms: int) -> tuple[str, str, list, dict[str, str]]:
    """A 2-partition topic of ``count`` events (10 min old), and the environment of a consumer
    process whose handler takes ``sleep_ms`` an event: (topic, aggregate type, sent, env)."""
    topic = f"outbox.event.{name}"
    create_topic(settings.kafka_bootstrap, topic, 2)
    sent = _produce_timed(settings.kafka_bootstrap, topic, name, count, int(time.time() * 1000) - 600_000)
    env = {"POSTBOX_REDIS_URL": settings.redis_url, "POSTBOX_KAFKA_BOOTSTRAP": settings.kafka_bootstrap, "POSTBOX_TEST_SLEEP_MS": str(sleep_ms)}
    return topic, name, sent, env


def test_window_applies_its_slice_once_and_a_changed_handler_meets_the_markers(settings, redis_client, unique):
    agg = f"win{unique}"
    topic = f"outbox.event.{agg}"
    group = f"test-window-{unique}"
    create_topic(settings.kafka_bootstrap, topic, 2)
    base = int(time.time() * 1000) - 3_600_000
    sent = _produce_timed(settings.kafka_bootstrap, topic, agg, 24, base)

    # events 6..17 by time: 6 on each partition; the end is exclusive (event 18 is not applied). The
    # group has no committed offset (it begins at the earliest record), so the window runs ahead of it: refused without --force
    ahead = _consume(settings, APP, group, topic, "--from", _iso(base + 6000), "--until", _iso(base + 18000))
    assert ahead.returncode == 1 and "offsets 0..2 (3 record(s)) are not applied yet" in " ".join(ahead.stderr.split()), ahead.stderr[-3000:]
    assert _applied(redis_client, agg) == {}
    first = _consume(settings, APP, group, topic, "--from", _iso(base + 6000), "--until", _iso(base + 18000), "--force")
    assert first.returncode == 0, first.stderr[-3000:]
    lines = _summary(first.stdout, topic)
    assert lines[0] == f"{topic}[0] offsets 3..8: applied 6, duplicate 0, dead-lettered 0"
    assert lines[1] == f"{topic}[1] offsets 3..8: applied 6, duplicate 0, dead-lettered 0"
    applied = _applied(redis_client, agg)
    assert applied == {eid: 1 for eid, _, _ in sent[6:18]}

    # a partition filter: only partition 1's first two records (events 1 and 3)
    only = _consume(settings, APP, group, topic, "--from", "beginning", "--until", "2", "--partition", "1")
    assert only.returncode == 0, only.stderr[-3000:]
    assert list(_summary(only.stdout, topic).values()) == [f"{topic}[1] offsets 0..1: applied 2, duplicate 0, dead-lettered 0"]

    # a later deploy of the handler replays the whole topic: the 14 events applied meet their markers
    second = _consume(settings, APP_CHANGED, group, topic, "--from", "beginning", "--until", "end")
    assert second.returncode == 0, second.stderr[-3000:]
    lines = _summary(second.stdout, topic)
    assert lines[0] == f"{topic}[0] offsets 0..11: applied 6, duplicate 6, dead-lettered 0"
    assert lines[1] == f"{topic}[1] offsets 0..11: applied 4, duplicate 8, dead-lettered 0"
    assert _applied(redis_client, agg) == {eid: 1 for eid, _, _ in sent}
    assert redis_client.hget(f"{{{agg}}}:v2:tally", "n") == b"10"  # only the new handler's own applies

    # the group's offsets were never touched, and nothing was committed under the window's client group
    assert set(committed(settings.kafka_bootstrap, group, topic, 2).values()) == {-1001}
    assert set(committed(settings.kafka_bootstrap, group + ".window", topic, 2).values()) == {-1001}


def test_window_beside_the_live_group_applies_every_event_exactly_once(settings, redis_client, unique, tmp_path):
    group = f"test-window-live-{unique}"
    # the live group is slow (40 ms an event, ~10 s in all): the window starts after it began and ends before it is done
    topic, agg, sent, env = _slow_topic(settings, f"winlive{unique}", 240, 40)
    live = ConsumerProcess(APP, env, tmp_path / "live.log", ["--group", group, "--topics", topic, "--batch-size", "10"])
    try:
        wait_for(lambda: 20 <= sum(max(0, o) for o in committed(settings.kafka_bootstrap, group, topic, 2).values()), 90,
                 "the live group under way")  # fmt: skip
        # no --force: the window starts behind the group (at the beginning), however far past it it ends
        window = _consume(settings, APP, group, topic, "--from", "beginning", "--until", "end", "--batch-size", "20")
        live_progress = sum(max(0, o) for o in committed(settings.kafka_bootstrap, group, topic, 2).values())
        assert window.returncode == 0, window.stderr[-3000:]
        wait_for(lambda: sum(committed(settings.kafka_bootstrap, group, topic, 2).values()) == 240, 90, "the live group done")
        assert live.alive(), live.output()
        during = live.log_path.read_text()  # the live group's log up to now (before its own shutdown)
        assert live.terminate() == 0
    finally:
        live.close()
    assert live_progress < 240, "the live group finished before the window did: they did not overlap"
    counts = _totals(window.stdout, topic)
    assert counts["applied"] + counts["duplicate"] == 240
    assert counts["duplicate"] >= 20  # it met the live group's markers
    assert counts["applied"] > 0  # and applied what the live group had not reached (which the live group then skips)
    assert _applied(redis_client, agg) == {eid: 1 for eid, _, _ in sent}  # exactly once, whoever applied it
    assert during.count("partitions assigned") == 1 and "revoked" not in during and "lost" not in during  # the window caused no rebalance


def test_an_interrupted_window_exits_4_and_running_it_again_finishes_it(settings, redis_client, unique, tmp_path):
    group = f"test-window-stop-{unique}"
    topic, agg, sent, env = _slow_topic(settings, f"winstop{unique}", 120, 60)
    window = ConsumerProcess(APP, env, tmp_path / "window.log", ["--group", group, "--topics", topic, "--batch-size", "5",
                                                                 "--from", "beginning", "--until", "end"])  # fmt: skip
    try:
        wait_for(lambda: len(_applied(redis_client, agg)) >= 10, 60, "the window under way")
        assert window.terminate() == 4  # SIGTERM: the batch finishes, nothing is committed
    finally:
        window.close()
    log_text = window.log_path.read_text()
    lines = [line for line in log_text.splitlines() if line.startswith(topic + "[")]
    assert len(lines) == 2 and all("(stopped before the end, at offset" in line for line in lines), lines
    # its log says what the signal does to a window (it said "committing, leaving the group" before)
    assert "signal received: finishing the batch and stopping the window (it commits nothing" in log_text, log_text[-3000:]
    assert "committing, leaving the group" not in log_text
    first = len(_applied(redis_client, agg))
    assert 10 <= first < 120

    again = _consume(settings, APP, group, topic, "--from", "beginning", "--until", "end")
    assert again.returncode == 0, again.stderr[-3000:]
    assert _totals(again.stdout, topic) == {"applied": 120 - first, "duplicate": first}
    assert _applied(redis_client, agg) == {eid: 1 for eid, _, _ in sent}


def test_a_window_dead_letters_what_fails_and_counts_it(settings, redis_client, unique):
    from tests.support.consumers import json_event, produce, read_all

    agg = f"windlq{unique}"
    topic = f"outbox.event.{agg}"
    group = f"test-window-dlq-{unique}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    create_topic(settings.kafka_bootstrap, f"{topic}.dlq", 1)
    kinds = ["Counted", "Boom", "Counted", "Boom", "Counted"]  # Boom: the handler always raises
    produce(settings.kafka_bootstrap, topic, [json_event(agg, "a1", kind, i, partition=0) for i, kind in enumerate(kinds)])
    done = _consume(settings, "tests.apps.counting:strict", group, topic, "--from", "beginning", "--until", "end", "--handler-retries", "0")
    assert done.returncode == 0, done.stderr[-3000:]
    assert _summary(done.stdout, topic)[0] == f"{topic}[0] offsets 0..4: applied 3, duplicate 0, dead-lettered 2"
    dead = read_all(settings.kafka_bootstrap, f"{topic}.dlq", expect=2)
    assert sorted(dict(m.headers())["postbox.origin.offset"] for m in dead) == [b"1", b"3"]
    assert redis_client.lrange(f"{{{agg}:a1}}:seq", 0, -1) == [b"0", b"2", b"4"]  # Boom's push was rolled back


def test_a_window_ending_at_transaction_markers_finishes(settings, redis_client, unique):
    """A transactional producer (Kafka Connect with exactly-once source support writes the outbox
    topics so) leaves control records and aborted records in the offsets: the window's last
    offsets hold no record the consumer is handed, and it must still see its end."""
    from confluent_kafka import Producer

    from tests.support.consumers import json_event

    agg = f"wintx{unique}"
    topic = f"outbox.event.{agg}"
    group = f"test-window-tx-{unique}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap, "transactional.id": f"test-{unique}"})
    producer.init_transactions(30)
    for commit, seqs in ((True, range(0, 4)), (False, range(4, 7))):  # 4 committed, then 3 aborted
        producer.begin_transaction()
        for key, value, headers, _ in (json_event(agg, "a1", "Counted", i) for i in seqs):
            producer.produce(topic, key=key, value=value, headers=headers, partition=0)
        producer.flush(30)
        producer.commit_transaction(30) if commit else producer.abort_transaction(30)
    done = _consume(settings, APP, group, topic, "--from", "beginning", "--until", "end")
    assert done.returncode == 0, done.stderr[-3000:]
    line = _summary(done.stdout, topic)[0]
    assert line.endswith("applied 4, duplicate 0, dead-lettered 0"), line  # offsets 0..8: 4 records, 2 markers, 3 aborted
    assert redis_client.lrange(f"{{{agg}:a1}}:seq", 0, -1) == [b"0", b"1", b"2", b"3"]


def test_a_transient_failure_inside_a_window_is_retried_in_order_and_the_window_still_ends(settings, redis_client, unique):
    """A handler whose dependency is down (ConnectionError: transient) pauses the partition and seeks
    back, as in a group member; the records after the window's end, fetched again on the retry,
    are still never applied."""
    from collections import Counter

    from postbox.consumer import App, ConsumerConfig
    from postbox.consumer.window import Span, WindowAssignment
    from tests.apps.counting import record
    from tests.support.consumers import ThreadedRuntime, json_event, produce

    calls: Counter[str] = Counter()
    app = App()

    @app.handler("*", "Counted")
    def counted(event, fx) -> None:
        record(event, fx)

    @app.handler("*", "Socket")
    def socket_down(event, fx) -> None:
        calls[event.id] += 1
        if calls[event.id] <= 3:
            raise ConnectionError("[Errno 111] Connection refused")
        record(event, fx)

    agg = f"wintr{unique}"
    topic = f"outbox.event.{agg}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    kinds = ["Counted"] * 4 + ["Socket"] + ["Counted"] * 10  # the window is offsets 0..9
    produce(settings.kafka_bootstrap, topic, [json_event(agg, "a1", kind, i, partition=0) for i, kind in enumerate(kinds)])
    config = ConsumerConfig.load(group=f"test-window-tr-{unique}", topics=topic, handler_retries=0, backoff_base_ms=50,
                                 backoff_max_ms=200, instance_id="none", redis_url=settings.redis_url,
                                 kafka_bootstrap=settings.kafka_bootstrap)  # fmt: skip
    window = WindowAssignment([Span(topic, 0, 0, 10)])
    runner = ThreadedRuntime(app, config, assignment=window).start()
    wait_for(lambda: not runner.thread.is_alive(), 60, "the window run to end by itself")
    assert runner.error is None and runner.exit_code == 0
    [(tally, reached)] = window.summary()
    assert reached and (tally.applied, tally.duplicate, tally.dead_lettered) == (10, 0, 0)
    assert sum(calls.values()) == 4 and runner.metrics.total("postbox_consumer_retries_total") >= 3
    assert redis_client.lrange(f"{{{agg}:a1}}:seq", 0, -1) == [str(i).encode() for i in range(10)]  # in order, none past the end


def test_a_topic_deleted_during_a_window_stops_it_with_the_reason(settings, redis_client, unique, tmp_path):
    """A window's partitions are fixed when it starts; once its topic is deleted they can never
    reach their end. Found by review: the run logged "Kafka client error (retrying)" forever and
    only a signal stopped it. Now it stops (exit 3, nothing more applied) naming the topic."""
    from tests.support.kafka import drop_topics

    group = f"test-window-gone-{unique}"
    topic, agg, _, env = _slow_topic(settings, f"wingone{unique}", 300, 50)
    small_fetches = ["-X", "fetch.max.bytes=1000", "-X", "message.max.bytes=1000", "-X", "max.partition.fetch.bytes=300",
                     "-X", "queued.max.messages.kbytes=1", "-X", "topic.metadata.refresh.interval.ms=1000",
                     "-X", "topic.metadata.propagation.max.ms=1000"]  # librdkafka waits 30 s by default before it says a topic is gone  # fmt: skip
    window = ConsumerProcess(APP, env, tmp_path / "window.log", ["--group", group, "--topics", topic, "--batch-size", "5",
                                                                 "--from", "beginning", "--until", "end", *small_fetches])  # fmt: skip
    try:
        wait_for(lambda: len(_applied(redis_client, agg)) >= 5, 60, "the window under way")
        drop_topics(settings.kafka_bootstrap, topic)
        try:
            code = window.process.wait(timeout=90)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the window kept running after its topic was deleted: {window.output()[-1500:]}") from None
    finally:
        window.close()
    log = window.log_path.read_text()
    assert code == 3, log[-3000:]
    assert f"{topic} is gone" in log, log[-3000:]
    assert len(_applied(redis_client, agg)) < 300
    lines = [line for line in log.splitlines() if line.startswith(topic + "[")]
    assert len(lines) == 2 and all("(stopped before the end, at offset" in line for line in lines), lines


def test_a_window_beside_the_live_consumer_does_not_take_its_metrics_port(settings, unique):
    """An on-call engineer runs a window where the live consumer runs (its pod, its environment):
    POSTBOX_METRICS_PORT is the live consumer's port, already bound. Found by review: the window
    died with an OSError traceback ("Address already in use"). A window serves no endpoints
    unless --metrics-port is given on its own command line; a port that is taken is a configuration
    error (exit 1, one line with the fix), for a group member too."""
    import socket

    topic, _, _, env = _slow_topic(settings, f"winport{unique}", 4, 0)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        window = _consume(settings, APP, f"test-window-port-{unique}", topic, "--from", "beginning", "--until", "end",
                          extra_env={**env, "POSTBOX_METRICS_PORT": port})  # fmt: skip
        member = _consume(settings, APP, f"test-window-port-{unique}", topic, "--metrics-port", port, extra_env=env)
    assert window.returncode == 0, window.stderr[-3000:]
    assert _totals(window.stdout, topic) == {"applied": 4, "duplicate": 0}
    assert member.returncode == 1 and "Traceback" not in member.stderr, member.stderr[-3000:]
    assert f"127.0.0.1:{port} is in use" in member.stderr and "--metrics-port" in member.stderr, member.stderr[-3000:]


def test_a_window_writes_markers_that_live_as_long_as_the_groups(settings, redis_client, unique):
    """The live group runs with the marker TTL its topics' retention needs (published in the
    group registry at start-up); on-call runs a window from elsewhere without --marker-ttl. Found
    by review: the window wrote its markers with the default 8 days and published 8 days as the
    group's TTL, so events it applied could be applied again after 8 days (a reset within 14 days
    of retention), and doctor checked the wrong bound. A window without --marker-ttl (or
    POSTBOX_MARKER_TTL) takes the group's published TTL."""
    from datetime import timedelta

    from postbox.effects import groups

    group = f"test-window-ttl-{unique}"
    topic, _, _, env = _slow_topic(settings, f"winttl{unique}", 4, 0)
    groups.publish(redis_client, group, timedelta(days=14))
    run = _consume(settings, APP, group, topic, "--from", "beginning", "--until", "end", extra_env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert groups.read(redis_client)[group].marker_ttl == timedelta(days=14)
    markers = list(redis_client.scan_iter(match=f"*:seen:{group}:*"))
    assert len(markers) == 4
    assert all(redis_client.pttl(m) > timedelta(days=13) / timedelta(milliseconds=1) for m in markers)
