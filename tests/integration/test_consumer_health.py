"""#16.4 the endpoint of a real `postbox consume` process: /healthz and /readyz beside /metrics on
the configured address; the default process/python collectors and postbox_build_info exported.
Readiness means "this process can do its work": of two members on a one-partition topic, the one
without the partition is ready too (an extra replica or a surge pod of a rolling update would
otherwise never be Ready and stall the rollout); its consumer check says it holds none."""

from __future__ import annotations

import uuid

import httpx
import pytest

import postbox
from tests.support.consumers import ConsumerProcess, committed, create_topic, json_event, produce, wait_for
from tests.support.redis_servers import free_port

pytestmark = pytest.mark.integration


def _get(port: int, path: str) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=10)


def _answers(port: int) -> bool:
    try:
        _get(port, "/healthz")
    except httpx.TransportError:
        return False
    return True


def test_health_ready_and_default_metrics_of_a_running_consumer(settings, redis_client, unique, tmp_path):
    agg = f"health{unique}"
    topic = f"outbox.event.{agg}"
    group = f"test-health-{unique}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    produce(settings.kafka_bootstrap, topic, [json_event(agg, "a1", "Counted", i, event_id=str(uuid.uuid4())) for i in range(3)])
    env = {"POSTBOX_REDIS_URL": settings.redis_url, "POSTBOX_KAFKA_BOOTSTRAP": settings.kafka_bootstrap}
    ports = [free_port(), free_port()]
    procs = [ConsumerProcess("tests.apps.counting:app", env, tmp_path / f"c{i}.log",
                             ["--group", group, "--topics", topic, "--metrics-port", str(port), "--metrics-host", "127.0.0.1"])
             for i, port in enumerate(ports)]  # fmt: skip
    try:
        wait_for(lambda: all(p.alive() for p in procs) and committed(settings.kafka_bootstrap, group, topic, 1)[0] == 3, 60, "3 committed")
        wait_for(lambda: all(_answers(p) for p in ports), 30, "both endpoints")
        for port in ports:
            live = _get(port, "/healthz")
            assert live.status_code == 200 and live.json()["checks"]["loop"]["ok"] is True
        wait_for(lambda: sorted(_get(p, "/readyz").status_code for p in ports) == [200, 200], 30, "both members ready")
        answers = [_get(p, "/readyz").json() for p in ports]
        for answer in answers:
            assert answer["status"] == "ok" and {n for n, c in answer["checks"].items() if c["ok"]} == {"consumer", "redis", "kafka", "durability"}
        assert sorted(a["checks"]["consumer"]["detail"] for a in answers) == ["subscribed, 0 partition(s) assigned", "subscribed, 1 partition(s) assigned"]
        text = _get(ports[0], "/metrics").text
        for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "python_info", "python_gc_objects_collected_total"):
            assert f"\n{name}" in text, name
        assert 'postbox_build_info{confluent_kafka="' in text and f'version="{postbox.__version__}"' in text
        for proc in procs:
            assert proc.terminate() == 0
    finally:
        for proc in procs:
            proc.close()
    redis_client.delete(f"{{{agg}:a1}}:seq", f"{{{agg}:a1}}:count")


def test_healthz_turns_503_while_a_handler_holds_the_loop_past_max_poll_interval(settings, redis_client, unique, tmp_path):
    """A real process whose handler sleeps 9 s per event with max.poll.interval.ms 6 s: /healthz
    answers 503 while the loop is stuck there (and 200 before), which a liveness probe restarts."""
    agg = f"stale{unique}"
    topic = f"outbox.event.{agg}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    env = {"POSTBOX_REDIS_URL": settings.redis_url, "POSTBOX_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
           "POSTBOX_TEST_SLEEP_MS": "9000"}
    port = free_port()
    proc = ConsumerProcess("tests.apps.counting:app", env, tmp_path / "stale.log",
                           ["--group", f"test-stale-{unique}", "--topics", topic, "--metrics-port", str(port),
                            "--session-timeout-ms", "6000", "--max-poll-interval-ms", "6000"])  # fmt: skip
    try:
        wait_for(lambda: proc.alive() and _answers(port) and _get(port, "/readyz").status_code == 200, 60, "assigned")
        assert _get(port, "/healthz").status_code == 200
        produce(settings.kafka_bootstrap, topic, [json_event(agg, "a1", "Counted", 0, event_id=str(uuid.uuid4()))])
        wait_for(lambda: _get(port, "/healthz").status_code == 503, 30, "/healthz 503 while the handler sleeps")
        stale = _get(port, "/healthz").json()["checks"]["loop"]
        assert stale["ok"] is False and "has not turned" in stale["detail"]
    finally:
        proc.close()
    redis_client.delete(f"{{{agg}:a1}}:seq", f"{{{agg}:a1}}:count")
