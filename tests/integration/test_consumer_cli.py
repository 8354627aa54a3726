"""`postbox consume`: flags, JSON logs, the Prometheus endpoint, and a graceful SIGTERM."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from tests.support.consumers import ConsumerProcess, committed, create_topic, json_event, produce, wait_for
from tests.support.redis_servers import free_port

pytestmark = pytest.mark.integration


def test_cli_serves_metrics_logs_json_and_stops_on_sigterm(settings, redis_client, unique, tmp_path):
    agg = f"cli{unique}"
    topic = f"outbox.event.{agg}"
    group = f"test-cli-{unique}"
    create_topic(settings.kafka_bootstrap, topic, 3)
    produce(settings.kafka_bootstrap, topic, [json_event(agg, f"a{i % 4}", "Counted", i, event_id=str(uuid.uuid4())) for i in range(20)])
    port = free_port()
    env = {"POSTBOX_REDIS_URL": settings.redis_url, "POSTBOX_KAFKA_BOOTSTRAP": settings.kafka_bootstrap, "POSTBOX_GROUP": "overridden"}
    args = ["--group", group, "--topics", topic, "--metrics-port", str(port), "--log-format", "json"]
    proc = ConsumerProcess("tests.apps.counting:app", env, tmp_path / "cli.log", args)
    try:
        wait_for(lambda: proc.alive() and sum(committed(settings.kafka_bootstrap, group, topic, 3).values()) == 20, 60, "20 committed")

        def scrape() -> str:
            return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text

        text = scrape()
        for name in ("postbox_consumer_events_consumed_total", "postbox_consumer_events_applied_total",
                     "postbox_consumer_duplicates_skipped_total", "postbox_consumer_batch_size_bucket",
                     "postbox_consumer_apply_seconds_bucket", "postbox_consumer_end_to_end_seconds_bucket"):
            assert name in text, name
        assert f'postbox_consumer_events_applied_total{{group="{group}",topic="{topic}"}} 20.0' in text
        wait_for(lambda: "postbox_consumer_lag{" in scrape(), 15, "the lag gauge")
        assert proc.terminate() == 0
    finally:
        proc.close()
    lines = [line for line in proc.log_path.read_text().splitlines() if line.startswith("{")]
    records = [json.loads(line) for line in lines]
    messages = [r["msg"] for r in records]
    assert "consumer subscribed" in messages and "consumer stopped" in messages
    assert any(r["msg"] == "consumer starting" and r["group"] == group for r in records)
    assert all({"ts", "level", "logger", "msg"} <= set(r) for r in records)
    keys = [k for i in range(4) for k in (f"{{{agg}:a{i}}}:seq", f"{{{agg}:a{i}}}:count")]
    assert sum(redis_client.llen(k) for k in keys if k.endswith(":seq")) == 20
    redis_client.delete(*keys)
