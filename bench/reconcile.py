"""Benchmark: how long `postbox reconcile` takes over a window of N events, all three hops.

    python bench/reconcile.py [--quick] [--events N] [--routed]

Sets up each hop as the pipeline would have left it:

- **outbox**: a private PostgreSQL cluster (tests/support/private_postgres.py: the stack's own
  server binaries, a free port, removed after) initialised by ``postbox db init``'s
  :func:`postbox.db.init_database`, holding the N rows (COPY), UUIDv7 ids made now;
- **Kafka**: on the running stack, a topic of its own (dropped after) with the N router-like
  records of those ids (``id``, ``aggregate_type``, ``created_at`` headers; keys over 1,000
  aggregates), and a consumer group committed at the end;
- **Redis**: a private redis-server holding the group's marker of every event: under its
  aggregate's tag, or with ``--routed`` under a routing key's tag (``customer:c<n>``) no record
  tells, so every marker is found by reconcile's SCAN fallback (its worst case).

Then times :func:`postbox.incident.reconcile_run.run_reconcile` (the CLI's own entry point) over the
window, reading the outbox with the private cluster's superuser. Prints a table and, as its last
line, one JSON object. Exits 1 when the reconcile counted fewer outbox rows, published or applied
events than were written, or found anything missing.
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

import psycopg  # noqa: E402

from postbox.db import init_database  # noqa: E402
from postbox.effects.keys import KeyLayout  # noqa: E402
from postbox.incident.reconcile_run import ReconcileRequest, run_reconcile  # noqa: E402
from postbox.outbox import uuid7  # noqa: E402
from postbox.settings import Settings  # noqa: E402
from tests.support.consumers import commit_at_end, create_topic, produce, router_headers  # noqa: E402
from tests.support.kafka import drop_topics  # noqa: E402
from tests.support.private_postgres import private_postgres  # noqa: E402
from tests.support.redis_servers import RedisServer  # noqa: E402

AGGREGATES = 1000


def uuid7_at(when: datetime) -> str:
    """A UUIDv7 of ``when`` (version 7, RFC variant, random tail)."""
    ms = int(when.timestamp() * 1000)
    return str(uuid.UUID(int=(ms << 80) | (0x7 << 76) | (0b10 << 62) | (uuid.uuid4().int & ((1 << 62) - 1))))


def write_rows(url: str, agg: str, ids: list[str], since: datetime) -> float:
    """The outbox rows of ``ids`` (COPY, one transaction), and one row an hour older than the
    window, so the table holds rows from before it, as a real outbox does (else reconcile rightly
    says retention may have cut the window); seconds taken."""
    t0 = time.perf_counter()
    older = since - timedelta(hours=1)
    with psycopg.connect(url) as conn, conn.cursor() as cur:
        with cur.copy("COPY postbox.outbox (id, aggregate_type, aggregate_id, event_type, payload, created_at) FROM STDIN") as copy:
            copy.write_row((uuid7_at(older), agg, "a0", "Counted", b'{"seq": 0}', older))
            now = datetime.now(timezone.utc)
            for i, eid in enumerate(ids):
                copy.write_row((eid, agg, f"a{i % AGGREGATES}", "Counted", b'{"seq": 1}', now))
    return time.perf_counter() - t0


def write_markers(client: object, group: str, agg: str, ids: list[str], *, routed: bool) -> None:
    layout = KeyLayout("postbox", group, slot_aligned=False)
    pipe = client.pipeline(transaction=False)  # type: ignore[attr-defined]
    for i, eid in enumerate(ids):
        tag = f"customer:c{i % AGGREGATES}" if routed else f"{agg}:a{i % AGGREGATES}"
        pipe.set(layout.marker(eid.encode(), tag.encode()), b"1", ex=86400)
    pipe.execute()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="10,000 events")
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--routed", action="store_true", help="markers under a routing key's tag: found by the SCAN fallback")
    args = parser.parse_args()
    n = 10_000 if args.quick else args.events
    settings = Settings.load()
    token = uuid.uuid4().hex[:8]
    agg, group = f"benchrec{token}", f"benchrecg{token}"
    topic = f"outbox.event.{agg}"
    since = datetime.now(timezone.utc) - timedelta(seconds=1)
    ids = [str(uuid7()) for _ in range(n)]
    with private_postgres() as pg:
        database_url = pg.admin_url()
        init_database(database_url, app_password=None, cdc_password=None)
        rows_s = write_rows(database_url, agg, ids, since)
        create_topic(settings.kafka_bootstrap, topic, 3)
        try:
            t0 = time.perf_counter()
            produce(settings.kafka_bootstrap, topic, ((f"a{i % AGGREGATES}".encode(), b'{"seq": 1}', router_headers(eid, "Counted", agg), None)
                                                      for i, eid in enumerate(ids)))  # fmt: skip
            produced_s = time.perf_counter() - t0
            commit_at_end(settings.kafka_bootstrap, group, topic, 3)
            with RedisServer() as server:
                write_markers(server.client(), group, agg, ids, routed=args.routed)
                request = ReconcileRequest(since, datetime.now(timezone.utc) + timedelta(seconds=1), aggregate_type=agg, groups=(group,),
                                           database_url=database_url)  # fmt: skip
                t1 = time.perf_counter()
                result = run_reconcile(request, replace(settings, redis_url=server.url))
                reconcile_s = time.perf_counter() - t1
        finally:
            drop_topics(settings.kafka_bootstrap, topic)
    (g,) = result.groups
    applied = g.counts["applied"]
    rows = result.outbox_rows or 0
    print(f"{'events':>10} {'rows':>10} {'published':>10} {'applied':>10} {'missing':>8} {'rows s':>7} {'produce s':>10} "
          f"{'reconcile s':>12} {'events/s':>10}")  # fmt: skip
    print(f"{n:>10,} {rows:>10,} {result.published:>10,} {applied:>10,} {result.missing:>8,} {rows_s:>7.1f} {produced_s:>10.1f} "
          f"{reconcile_s:>12.1f} {n / reconcile_s:>10,.0f}")  # fmt: skip
    for line in result.notes:
        print(f"note: {line}")
    print(json.dumps({"bench": "reconcile", "events": n, "markers": "routed" if args.routed else "aggregate", "outbox_rows": rows, "published": result.published, "applied": applied,
                      "missing": result.missing, "reconcile_seconds": round(reconcile_s, 2),
                      "events_per_second": round(n / reconcile_s)}))  # fmt: skip
    return 0 if min(rows, result.published, applied) >= n and not result.missing else 1


if __name__ == "__main__":
    sys.exit(main())
