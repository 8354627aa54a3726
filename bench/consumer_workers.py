"""The ``postbox consume --workers N`` contender of ``bench/consumer.py``: N group members under one
supervisor, as a user starts them, observed through their public Prometheus endpoints only.

Worker ``i`` serves ``--metrics-port PORT+i``; the bench scrapes every worker's
``postbox_consumer_events_consumed_total`` and applied + duplicates counters and counts from the
first record consumed (group join and interpreter start excluded, as for the in-process runtime)
to the moment the sum of done events reaches the topic's size. The scrape every 0.1 s costs the
workers a little CPU; it is the same for every worker count.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

from counting import Tally

HERE = Path(__file__).resolve().parent
SCRAPE_S = 0.1
CONSUMED = "postbox_consumer_events_consumed_total"
DONE = ("postbox_consumer_events_applied_total", "postbox_consumer_duplicates_skipped_total")


def _free_ports(count: int) -> int:
    """A base port with ``count`` consecutive free loopback ports."""
    for _ in range(200):
        base = random.randint(20_000, 40_000)
        try:
            for port in range(base, base + count):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise SystemExit("bench: no free metrics ports")


def _scrape(port: int) -> tuple[float, float]:
    """(consumed, done) of one worker; (0, 0) until its endpoint answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as reply:
            text = reply.read().decode()
    except OSError:
        return 0.0, 0.0
    consumed = done = 0.0
    for line in text.splitlines():
        if line.startswith(CONSUMED):
            consumed += float(line.rsplit(" ", 1)[1])
        elif line.startswith(DONE):
            done += float(line.rsplit(" ", 1)[1])
    return consumed, done


def run_workers(bootstrap: str, redis_url: str, topic: str, n: int, workers: int, tallies: list[Tally]) -> float:
    """Events/s of ``postbox consume --workers N`` over the whole topic (a fresh group)."""
    port = _free_ports(workers)
    group = f"bench-workers{workers}-{uuid.uuid4().hex[:8]}"
    argv = [sys.executable, "-m", "postbox", "consume", "consumer:make_app", "--workers", str(workers),
            "--group", group, "--topics", topic, "--kafka-bootstrap", bootstrap, "--redis-url", redis_url,
            "--metrics-port", str(port), "--log-level", "WARNING", "--instance-id", "none",
            "--schemas-dir", str(HERE.parent / "schemas")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent)])}
    proc = subprocess.Popen(argv, cwd=HERE, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    start = None
    done = 0.0
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            counts = [_scrape(port + i) for i in range(workers)]
            consumed, done = sum(c for c, _ in counts), sum(d for _, d in counts)
            if start is None and consumed > 0:
                start = time.perf_counter()
            if done >= n:
                break
            time.sleep(SCRAPE_S)
        elapsed = time.perf_counter() - (start or time.perf_counter())
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    tallies.append(Tally(f"consumer --workers {workers}: events applied", n, int(done)))
    return n / elapsed if elapsed > 0 else 0.0
