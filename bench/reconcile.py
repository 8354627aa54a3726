"""Benchmark: how long `postbox reconcile` takes over a window of N events.

    python bench/reconcile.py [--quick] [--events N]

Sets up, on the running stack's Kafka, a topic of its own with N router-like records (their
``id``, ``aggregate_type`` and ``created_at`` headers, keys over 1,000 aggregates), a consumer
group committed at the end, and on a private redis-server the group's markers of every event, as
the consumer would have left them; then times :func:`postbox.incident.reconcile_run.run_reconcile`
(the CLI's own entry point) over the window. Prints a table and, as its last line, one JSON object.
Exits 1 when the reconcile counted fewer applied events than were sent.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: tests.support

from postbox.effects.keys import KeyLayout  # noqa: E402
from postbox.incident.reconcile_run import ReconcileRequest, run_reconcile  # noqa: E402
from postbox.outbox import uuid7  # noqa: E402
from postbox.settings import Settings  # noqa: E402
from tests.support.consumers import commit_at_end, create_topic, produce, router_headers  # noqa: E402
from tests.support.kafka import drop_topics  # noqa: E402
from tests.support.redis_servers import RedisServer  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="10,000 events")
    parser.add_argument("--events", type=int, default=100_000)
    args = parser.parse_args()
    n = 10_000 if args.quick else args.events
    settings = Settings.load()
    token = uuid.uuid4().hex[:8]
    agg, group = f"benchrec{token}", f"benchrecg{token}"
    topic = f"outbox.event.{agg}"
    since = datetime.now(timezone.utc) - timedelta(seconds=1)
    ids = [str(uuid7()) for _ in range(n)]
    create_topic(settings.kafka_bootstrap, topic, 3)
    try:
        t0 = time.perf_counter()
        produce(settings.kafka_bootstrap, topic, ((f"a{i % 1000}".encode(), b'{"seq": 1}', router_headers(eid, "Counted", agg), None)
                                                  for i, eid in enumerate(ids)))  # fmt: skip
        produced_s = time.perf_counter() - t0
        commit_at_end(settings.kafka_bootstrap, group, topic, 3)
        with RedisServer() as server:
            client = server.client()
            layout = KeyLayout("postbox", group, slot_aligned=False)
            pipe = client.pipeline(transaction=False)
            for i, eid in enumerate(ids):
                pipe.set(layout.marker(eid.encode(), f"{agg}:a{i % 1000}".encode()), b"1", ex=86400)
            pipe.execute()
            request = ReconcileRequest(since, datetime.now(timezone.utc) + timedelta(seconds=1), aggregate_type=agg, groups=(group,))
            t1 = time.perf_counter()
            result = run_reconcile(request, replace(settings, redis_url=server.url))
            reconcile_s = time.perf_counter() - t1
    finally:
        drop_topics(settings.kafka_bootstrap, topic)
    (g,) = result.groups
    applied = g.counts["applied"]
    print(f"{'events':>10} {'published':>10} {'applied':>10} {'produce s':>10} {'reconcile s':>12} {'events/s':>10}")
    print(f"{n:>10,} {result.published:>10,} {applied:>10,} {produced_s:>10.1f} {reconcile_s:>12.1f} {n / reconcile_s:>10,.0f}")
    print(json.dumps({"bench": "reconcile", "events": n, "published": result.published, "applied": applied,
                      "reconcile_seconds": round(reconcile_s, 2), "events_per_second": round(n / reconcile_s)}))  # fmt: skip
    return 0 if applied >= n and result.published >= n else 1


if __name__ == "__main__":
    sys.exit(main())
