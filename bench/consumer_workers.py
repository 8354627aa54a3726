"""The ``postbox consume --workers N`` contender of ``bench/consumer.py``: N group members under one
supervisor, as a user starts them, observed through their public Prometheus endpoints only.

Worker ``i`` serves ``--metrics-port PORT+i``; the bench scrapes every worker's
``postbox_consumer_assigned_partitions``, ``postbox_consumer_events_consumed_total`` and applied +
duplicates counters. The clock starts once EVERY worker holds partitions and has consumed a record
(interpreter start, group join and the rebalance a second member's join causes are left out: the
first worker starts alone and hands partitions over when the second joins) and stops when the
sum of done events reaches the topic's size; the rate counts the events done in between. The
scrape every 0.1 s costs the workers a little CPU; it is the same for every worker count.
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
ASSIGNED = "postbox_consumer_assigned_partitions{"
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


def _scrape(port: int) -> tuple[float, float, float]:
    """(assigned partitions, consumed, done) of one worker; zeros until its endpoint answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as reply:
            text = reply.read().decode()
    except OSError:
        return 0.0, 0.0, 0.0
    assigned = consumed = done = 0.0
    for line in text.splitlines():
        if line.startswith(ASSIGNED):
            assigned += float(line.rsplit(" ", 1)[1])
        elif line.startswith(CONSUMED):
            consumed += float(line.rsplit(" ", 1)[1])
        elif line.startswith(DONE):
            done += float(line.rsplit(" ", 1)[1])
    return assigned, consumed, done


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
    start, done_at_start = None, 0.0
    done = 0.0
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            counts = [_scrape(port + i) for i in range(workers)]
            done = sum(d for _, _, d in counts)
            if start is None and all(a > 0 and c > 0 for a, c, _ in counts):
                start, done_at_start = time.perf_counter(), done
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
    return (n - done_at_start) / elapsed if elapsed > 0 else 0.0
