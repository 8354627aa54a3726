"""Acceptance: Redis stopped for 10 s under load — the consumer retries with backoff, commits
nothing past what Redis durably holds, and after Redis returns every event is applied once, in
order. Uses a redis-server of its own (the shared one must stay up)."""

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
        server.stop(keep_dir=True)  # SIGTERM: what was acknowledged is in the fsynced AOF
        stopped_at = time.monotonic()
        durable = durable_lengths(server.dir, agg)
        time.sleep(1.0)
        early = committed(settings.kafka_bootstrap, group, topic, PARTITIONS)
        wait_for(lambda: runtime.metrics.total("postbox_consumer_retries_total") >= 2, 10, "transient retries during the outage")
        time.sleep(max(0.0, OUTAGE_S - 0.5 - (time.monotonic() - stopped_at)))
        late = committed(settings.kafka_bootstrap, group, topic, PARTITIONS)
        assert runtime.metrics.value("postbox_consumer_paused_partitions") >= 1
        for p in range(PARTITIONS):
            assert late[p] == early[p], f"partition {p} committed during the outage"
            assert 0 < late[p] <= durable[p], f"partition {p}: committed {late[p]} past the {durable[p]} durable events"
        assert produced[0] > durable[0] + 50, "the load kept coming during the outage"

        server.start()  # same port and folder: the AOF comes back
        client = server.client()
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
