"""#16.4 /healthz and /readyz of the consumer's HTTP endpoint, served for real on a free port; the
loop's clock is the test's (a stale loop is a clock moved past the limit, not a sleep)."""

from __future__ import annotations

import httpx
from prometheus_client import CollectorRegistry, Counter

from postbox.consumer.health import HealthServer, Liveness, Probe, membership_check


def _serve(live: Probe, ready: Probe, registry: CollectorRegistry | None = None) -> HealthServer:
    return HealthServer("127.0.0.1", 0, registry or CollectorRegistry(), live, ready).start()


def test_healthz_is_503_once_the_loop_stopped_turning_and_200_again_when_it_turns() -> None:
    now = [1000.0]
    liveness = Liveness(stale_after_s=300, clock=lambda: now[0])
    server = _serve(Probe({"loop": liveness.check}), Probe({}))
    try:
        url = f"http://127.0.0.1:{server.port}/healthz"
        assert httpx.get(url).status_code == 200
        now[0] += 301
        stale = httpx.get(url)
        assert stale.status_code == 503
        assert stale.json()["checks"]["loop"]["ok"] is False and "301 s" in stale.json()["checks"]["loop"]["detail"]
        liveness.beat()
        assert httpx.get(url).status_code == 200
    finally:
        server.close()


def test_readyz_names_each_failing_check_and_a_raising_check_fails() -> None:
    def redis_down() -> tuple[bool, str]:
        raise ConnectionError("Connection refused")

    ready = Probe({"partitions": lambda: (True, "3 partition(s) assigned"), "redis": redis_down})
    registry = CollectorRegistry()
    Counter("postbox_probe_test", "a metric", registry=registry).inc()
    server = _serve(Probe({}), ready, registry)
    try:
        base = f"http://127.0.0.1:{server.port}"
        answer = httpx.get(f"{base}/readyz")
        assert answer.status_code == 503
        body = answer.json()
        assert body["status"] == "fail" and body["checks"]["partitions"]["ok"] is True
        assert body["checks"]["redis"] == {"ok": False, "detail": "ConnectionError: Connection refused"}
        assert "postbox_probe_test_total 1.0" in httpx.get(f"{base}/metrics").text
        assert httpx.get(f"{base}/nope").status_code == 404
    finally:
        server.close()


def test_a_member_without_partitions_is_ready_once_subscribed_and_not_while_stopping() -> None:
    state = {"subscribed": False, "stopping": False, "partitions": 0}
    check = membership_check(lambda: state["subscribed"], lambda: state["stopping"], lambda: state["partitions"])
    assert check() == (False, "not subscribed yet")
    state["subscribed"] = True
    assert check() == (True, "subscribed, 0 partition(s) assigned")
    state["partitions"] = 3
    assert check() == (True, "subscribed, 3 partition(s) assigned")
    state["stopping"] = True
    assert check() == (False, "shutting down (3 partition(s) assigned)")
