"""The consumer's HTTP endpoint: ``/metrics``, ``/healthz`` and ``/readyz`` on one address.

- ``/healthz`` — liveness: the process answers and its loop turns. The loop marks each turn
  (:meth:`Liveness.beat`); when no turn happened for ``stale_after_s`` (the consumer's
  ``max_poll_interval_ms``: past it Kafka itself gives the partitions away) the answer is 503, so
  an orchestrator restarts a process stuck in a handler or a hung client call.
- ``/readyz`` — readiness, "this process can do its work": the consumer has subscribed and its
  loop runs (holding partitions or not: a member with none is ready to take some), Redis answers
  a PING, the Kafka cluster answers a metadata request, and the durability check passes (when
  ``require_durable``). Any failing check is 503; the body names each check and why.
- ``/metrics`` — the Prometheus registry (:mod:`postbox.consumer.metrics`).

Bodies are JSON (``{"status": "ok"|"fail", "checks": {name: {"ok": bool, "detail": str}}}``).
Served by the standard library's threading HTTP server in daemon threads; each probe runs in the
request's thread and bounds its own wait (``PROBE_TIMEOUT_S``), never the consumer loop's.
"""

from __future__ import annotations

import errno
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from postbox.errors import ConfigError

#: The longest a readiness probe waits for Redis or Kafka.
PROBE_TIMEOUT_S = 2.0

#: One readiness check: () -> (passed, detail). It may raise: that is a failed check with the error.
Check = Callable[[], "tuple[bool, str]"]


class Liveness:
    """When the consumer loop last turned (monotonic clock; ``clock`` is replaceable for tests)."""

    def __init__(self, stale_after_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.stale_after_s = stale_after_s
        self._clock = clock
        self._last = clock()

    def beat(self) -> None:
        self._last = self._clock()

    def check(self) -> tuple[bool, str]:
        age = self._clock() - self._last
        if age > self.stale_after_s:
            return False, f"the consumer loop has not turned for {age:.0f} s (limit {self.stale_after_s:.0f} s)"
        return True, f"loop turned {age:.1f} s ago"


@dataclass(frozen=True)
class Probe:
    """Named checks and the verdict over them."""

    checks: Mapping[str, Check]

    def run(self) -> tuple[bool, dict[str, Any]]:
        results: dict[str, dict[str, Any]] = {}
        for name, check in self.checks.items():
            try:
                ok, detail = check()
            except Exception as exc:  # noqa: BLE001 - a probe that raises is a failed check, reported
                ok, detail = False, f"{type(exc).__name__}: {exc}"
            results[name] = {"ok": ok, "detail": detail}
        passed = all(r["ok"] for r in results.values())
        return passed, {"status": "ok" if passed else "fail", "checks": results}


class HealthServer:
    """``/metrics``, ``/healthz`` and ``/readyz`` on ``host:port`` (port 0: a free one, see ``port``)."""

    def __init__(self, host: str, port: int, registry: CollectorRegistry, live: Probe, ready: Probe) -> None:
        routes: dict[str, Callable[[], tuple[int, str, bytes]]] = {
            "/metrics": lambda: (200, CONTENT_TYPE_LATEST, generate_latest(registry)),
            "/healthz": lambda: _json(live),
            "/readyz": lambda: _json(ready),
        }

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                route = routes.get(self.path.split("?", 1)[0])
                code, kind, body = route() if route is not None else (404, "text/plain", b"not found: /metrics /healthz /readyz\n")
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - scrapes every few seconds: not logged
                return

        self._server = _listen(host, port, Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="postbox-health", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> "HealthServer":
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _json(probe: Probe) -> tuple[int, str, bytes]:
    passed, body = probe.run()
    return (200 if passed else 503), "application/json", (json.dumps(body) + "\n").encode()


# -- the consumer's checks ---------------------------------------------------------------------------


def membership_check(subscribed: Callable[[], bool], stopping: Callable[[], bool], partitions: Callable[[], int]) -> Check:
    """Ready once the consumer has subscribed and its loop runs, with partitions or without: a
    member with none (an extra replica, a surge pod of a rolling update, a first deploy before
    Debezium created the topic) does its work the moment the group hands it some, and a rollout
    that waited for it to hold partitions would never finish. Not ready while it shuts down."""

    def check() -> tuple[bool, str]:
        n = partitions()
        if stopping():
            return False, f"shutting down ({n} partition(s) assigned)"
        if not subscribed():
            return False, "not subscribed yet"
        return True, f"subscribed, {n} partition(s) assigned"

    return check


def redis_check(client: Any) -> Check:
    def check() -> tuple[bool, str]:
        return bool(client.ping()), "PING answered"

    return check


def kafka_check(open_admin: Callable[[], Any]) -> Check:
    """A metadata request through an admin client of the probe's own, opened on first use by
    ``open_admin``: not the consumer's client — a metadata call on it from another thread while
    the loop is inside ``consume()`` hangs past its timeout (seen with confluent-kafka 2.16)."""
    admin: list[Any] = []
    lock = threading.Lock()

    def check() -> tuple[bool, str]:
        with lock:
            if not admin:
                admin.append(open_admin())
            client = admin[0]
        brokers = client.list_topics(timeout=PROBE_TIMEOUT_S).brokers
        return bool(brokers), f"{len(brokers)} broker(s) answered"

    return check


def durability_check(engine: Any, required: bool) -> Check:
    """The effects engine's durability verdict (cached a minute by the engine); failing only when
    the consumer requires durability (it would not commit then)."""

    def check() -> tuple[bool, str]:
        verdict = engine.durability()
        return bool(verdict.durable or not required), str(verdict) if not verdict.durable else f"durable ({verdict.method})"

    return check


def _listen(host: str, port: int, handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """The endpoints' server, or ConfigError naming the address: a port another process holds
    (the live consumer beside a window run, a second consumer on one host) is a setting to change,
    not a crash."""
    try:
        return ThreadingHTTPServer((host, port), handler)
    except OSError as exc:
        why = "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be listened on ({exc.strerror})"
        raise ConfigError(f"the metrics and health endpoints' address {host}:{port} {why}",
                          fix="pick another --metrics-port / --metrics-host (POSTBOX_METRICS_PORT, POSTBOX_METRICS_HOST), or --metrics-port 0 to serve none") from None  # fmt: skip
