"""Acceptance: Redis crashes (SIGKILL) under load and stays down for 10 s — the consumer retries
with backoff, never commits an offset past what the crashed server's AOF holds (read from the AOF
the crash left, so an offset committed before its fsync would show), and after Redis returns every
event is applied once, in order. Uses a redis-server of its own (the shared one must stay up),
with ``appendfsync always``.

Shown to fail: with ``_process`` marking a blocked partition's batch done (scratch edit, not
committed) the committed offsets ran past the AOF during the outage and the test failed."""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from postbox.consumer import ConsumerConfig
from tests.apps.counting import app
from tests.support.consumers import ThreadedRuntime, committed, create_topic, json_event, produce, wait_for
from tests.support.redis_servers import RedisServer

pytestmark = pytest.mark.integration
PARTITIONS = 3
OUTAGE_S = 10.0


def lengths(client, agg: str) -> dict[int, int]:
    return {p: client.llen(f"{{{agg}:p{p}}}:seq") for p in range(PARTITIONS)}


def durable_lengths(data_dir: Path, agg: str) -> dict[int, int]:
    """What the stopped server's AOF holds: load a copy into a throwaway server and count."""
    copy = Path(tempfile.mkdtemp(prefix="postbox-aof-copy-"))
    shutil.copytree(data_dir / "appendonlydir", copy / "appendonlydir")
    server = RedisServer(workdir=copy).start()
    try:
        client = server.client()
        try:
            return lengths(client, agg)
        finally:
            client.close()
    finally:
        server.stop()
        shutil.rmtree(copy, ignore_errors=True)


def test_redis_outage_retries_commits_nothing_past_it_and_applies_everything_once(settings, unique):
    agg = f"out{unique}"
    topic = f"outbox.event.{agg}"
    group = f"test-outage-{unique}"
    create_topic(settings.kafka_bootstrap, topic, PARTITIONS)
    server = RedisServer().start()
    produced = {p: 0 for p in range(PARTITIONS)}
    stop_producing = threading.Event()

    def producer() -> None:  # steady load: 3 x 10 events every 50 ms on every partition
        while not stop_producing.is_set():
            batch = []
            for p in range(PARTITIONS):
                for _ in range(10):
                    batch.append(json_event(agg, f"p{p}", "Counted", produced[p], partition=p, event_id=str(uuid.uuid4())))
                    produced[p] += 1
            produce(settings.kafka_bootstrap, topic, batch)
            time.sleep(0.05)

    config = ConsumerConfig.load(group=group, topics=topic, redis_url=server.url, batch_size=50, batch_wait_ms=50,
                                 backoff_base_ms=100, backoff_max_ms=2000)
    runtime = ThreadedRuntime(app, config).start()
    load = threading.Thread(target=producer, daemon=True)
    load.start()
    client = server.client()
    try:
        wait_for(lambda: runtime.ok() and min(lengths(client, agg).values()) >= 30, 60, "events applied before the outage")
        server.kill()  # a crash: only what was fsynced before each acknowledgement survives
        killed_at = time.monotonic()
        durable = durable_lengths(server.dir, agg)  # what a restart will load
        samples: list[dict[int, int]] = []  # committed offsets through the outage, from the kill on
        settled: list[dict[int, int]] = []  # ... once the consumer has retried (nothing can commit now)
        while time.monotonic() - killed_at < OUTAGE_S:
            retried = runtime.ok() and runtime.metrics.total("postbox_consumer_retries_total") >= 2
            offsets = committed(settings.kafka_bootstrap, group, topic, PARTITIONS)
            samples.append(offsets)
            if retried:
                settled.append(offsets)
            time.sleep(0.2)
        assert settled, "the consumer never retried during the outage"
        assert runtime.metrics.value("postbox_consumer_paused_partitions") >= 1
        for p in range(PARTITIONS):
            assert settled[-1][p] > 0, f"partition {p}: nothing committed before the outage"
            assert all(s[p] <= durable[p] for s in samples), \
                f"partition {p}: committed {[s[p] for s in samples]} vs {durable[p]} events in the AOF after the crash"
            assert {s[p] for s in settled} == {settled[0][p]}, f"partition {p} committed during the outage: {[s[p] for s in settled]}"
        assert produced[0] > durable[0] + 50, "the load kept coming during the outage"

        server.start()  # same port and folder: the AOF comes back
        client = server.client()
        after = lengths(client, agg)
        for p in range(PARTITIONS):  # nothing committed is missing after the crash
            assert after[p] >= samples[-1][p], f"partition {p}: committed {samples[-1][p]} but {after[p]} applied after the restart"
        time.sleep(1.0)
        stop_producing.set()
        load.join(30)
        wait_for(lambda: runtime.ok() and lengths(client, agg) == produced, 90, "every event applied after Redis returned")
        wait_for(lambda: committed(settings.kafka_bootstrap, group, topic, PARTITIONS) == produced, 30, "offsets committed to the end")
        runtime.stop()
        for p in range(PARTITIONS):
            assert [int(x) for x in client.lrange(f"{{{agg}:p{p}}}:seq", 0, -1)] == list(range(produced[p]))
        assert runtime.metrics.total("postbox_consumer_dead_lettered_total") == 0
    finally:
        stop_producing.set()
        if runtime.thread.is_alive():
            runtime.runtime.stop()
            runtime.thread.join(30)
        client.close()
        server.stop()
