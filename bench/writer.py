"""Benchmark of the outbox writer: what an emit costs a business transaction, and batch throughput.

Runs against a scratch database ``postbox_bench`` on the cluster of POSTBOX_DATABASE_URL (created
and set up with ``postbox.db.init_database`` through the admin URL: POSTBOX_ADMIN_DATABASE_URL,
else the local stack's superuser socket). Writes as the app role, like an application.

Measured side by side in one run (scenarios interleaved, several rounds, medians), 2 clients:

  base        business INSERT only                      (pipeline: BEGIN, then INSERT+COMMIT)
  emit        business INSERT + emit, same round trip   (retention: partitions; the default)
  emit_delete business INSERT + emit + DELETE           (retention: delete-in-transaction)
  base_plain  business INSERT only, no pipeline         (BEGIN, INSERT, COMMIT: 3 round trips)
  emit_plain  business INSERT + emit as its own round trip (no pipeline)
  batch       emit_many of N events in one transaction

and the pgbench-equivalent references (no postbox code: a hand-made statement, payload bytes and
ids made in advance), pipelined like ``emit``, so emit_vs_reference separates our cost from the
database's:

  reference        business INSERT + one hand-made outbox INSERT      (partitioned postbox.outbox)
  reference_plain  the same into an unpartitioned copy of the outbox  (partitioning's own cost)
  reference_message business INSERT + pg_logical_emit_message(true, ...)  (no table row at all)

and the off-path cost of each retention: dropping a partition of R rows vs deleting them.

Prints a table, then as its last line one JSON object (emit_tps_ratio = emit / base, ...).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg

from postbox.stack.stack import admin_database_url
from psycopg import sql
from psycopg.conninfo import make_conninfo

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from postbox.codec import AvroCodec  # noqa: E402
from postbox.db import init_database  # noqa: E402
from postbox.outbox import Event, Outbox, Retention  # noqa: E402
from postbox.outbox.uuid7 import uuid7  # noqa: E402
from postbox.schemas import SchemaRepository  # noqa: E402
from postbox.settings import Settings  # noqa: E402

BENCH_DB = "postbox_bench"
ROOT = Path(__file__).resolve().parents[1]
PAYLOAD = {
    "order_id": "o-1",
    "customer_id": "c-1",
    "items": [{"sku": "tea", "quantity": 2, "unit_price_cents": 450}, {"sku": "cup", "quantity": 1, "unit_price_cents": 900}],
    "total_cents": 1800,
    "placed_at": datetime(2024, 1, 1, tzinfo=timezone.utc),
    "currency": "EUR",
    "coupon": None,
}
BUSINESS_SQL = "INSERT INTO bench_orders (customer_id, total_cents) VALUES (%s, %s)"
UNPARTITIONED = "bench_outbox_unpartitioned"
REFERENCE_SQL = {
    "reference": "INSERT INTO postbox.outbox (id, aggregate_type, aggregate_id, event_type, payload)"
                 " VALUES (%s, 'order', %s, 'OrderPlaced', %s)",
    "reference_plain": f"INSERT INTO {UNPARTITIONED} (id, aggregate_type, aggregate_id, event_type, payload)"
                       " VALUES (%s, 'order', %s, 'OrderPlaced', %s)",
    # A transactional logical decoding message: in the WAL with the commit, no row, no index.
    "reference_message": "SELECT pg_logical_emit_message(true, 'postbox.outbox', %s::bytea)",
}


def admin_url() -> str:
    return admin_database_url()


def setup(admin: str, app_url: str) -> str:
    """Create and initialise the scratch database; return the app role's URL for it."""
    with psycopg.connect(admin, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (BENCH_DB,)).fetchone():
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(BENCH_DB)))
    bench_admin = make_conninfo(admin, dbname=BENCH_DB)
    # Grants for delete-in-transaction (a superset of what partitions need) so both can run.
    init_database(bench_admin, app_password=None, cdc_password=None, retention="delete")
    with psycopg.connect(bench_admin, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_orders")
        conn.execute(
            "CREATE TABLE bench_orders (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
            " customer_id text NOT NULL, total_cents bigint NOT NULL, created_at timestamptz NOT NULL DEFAULT now())"
        )
        conn.execute("GRANT INSERT ON bench_orders TO postbox_app")
        # The same table, constraints and primary key, without partitions (the reference_plain row).
        conn.execute(f"DROP TABLE IF EXISTS {UNPARTITIONED}")
        conn.execute(f"CREATE TABLE {UNPARTITIONED} (LIKE postbox.outbox INCLUDING ALL)")
        conn.execute(f"GRANT INSERT ON {UNPARTITIONED} TO postbox_app")
        conn.execute("TRUNCATE postbox.outbox")
        conn.execute("SET ROLE postbox_owner")
        conn.execute("SELECT postbox.outbox_ensure_partitions('1 day', '2 days')")
    return make_conninfo(app_url, dbname=BENCH_DB)


class ReferenceRows:
    """What a hand-written producer would send: ids counted up from one UUIDv7-shaped start,
    payload bytes encoded once in advance (the same bytes an emit of PAYLOAD produces)."""

    def __init__(self, payload: bytes) -> None:
        ms = time.time_ns() // 1_000_000
        self.first = (ms << 80) | (0x7 << 76) | (0b10 << 62) | (int.from_bytes(os.urandom(6), "big") << 16)
        self.payload = payload

    def params(self, kind: str, i: int) -> tuple[object, ...]:
        if kind == "reference_message":
            return (self.payload,)
        return (uuid.UUID(int=self.first + i), f"o-{i}", self.payload)


def one_tx(kind: str, conn: psycopg.Connection, outbox: Outbox, outbox_delete: Outbox, ref: ReferenceRows, i: int) -> None:
    if kind in REFERENCE_SQL:
        with conn.pipeline(), conn.transaction():
            conn.execute(BUSINESS_SQL, ("c-1", i))
            conn.execute(REFERENCE_SQL[kind], ref.params(kind, i))
    elif kind in ("base", "emit", "emit_delete"):
        with conn.pipeline(), conn.transaction():
            conn.execute(BUSINESS_SQL, ("c-1", i))
            if kind == "emit":
                outbox.emit(conn, "order", f"o-{i}", "OrderPlaced", PAYLOAD)
            elif kind == "emit_delete":
                outbox_delete.emit(conn, "order", f"o-{i}", "OrderPlaced", PAYLOAD)
    else:
        with conn.transaction():
            conn.execute(BUSINESS_SQL, ("c-1", i))
            if kind == "emit_plain":
                outbox.emit(conn, "order", f"o-{i}", "OrderPlaced", PAYLOAD)


def measure_tps(kind: str, url: str, outboxes: tuple[Outbox, Outbox], payload: bytes, clients: int, seconds: float) -> float:
    """Committed transactions per second over ``clients`` client *processes* (like pgbench's
    clients: threads would share one GIL and measure Python's lock instead of the database)."""
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    start_at = time.monotonic() + 0.5  # every client starts (after its warm-up) at once

    def work() -> None:
        try:
            ref = ReferenceRows(payload)
            with psycopg.connect(url) as conn:
                for w in range(20):  # warm up: prepared statements, caches
                    one_tx(kind, conn, *outboxes, ref, -1 - w)
                while time.monotonic() < start_at:
                    time.sleep(0.001)
                stop = start_at + seconds
                n = 0
                while time.monotonic() < stop:
                    one_tx(kind, conn, *outboxes, ref, n)
                    n += 1
                results.put(("ok", n))
        except BaseException as exc:  # noqa: BLE001 - reported by the parent
            results.put(("error", repr(exc)))

    procs = [ctx.Process(target=work) for _ in range(clients)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=seconds + 60) for _ in procs]
    for p in procs:
        p.join()
    errors = [detail for status, detail in outcomes if status == "error"]
    if errors:
        raise RuntimeError(f"{kind}: a client failed: {errors[0]}")
    return sum(n for _, n in outcomes) / seconds


def measure_batch(url: str, outbox: Outbox, size: int) -> float:
    events = [Event("order", f"o-{i % 100}", "OrderPlaced", PAYLOAD) for i in range(size)]
    with psycopg.connect(url) as conn:
        started = time.perf_counter()
        with conn.transaction():
            outbox.emit_many(conn, events)
        return size / (time.perf_counter() - started)


def measure_retention(admin: str, rows: int) -> tuple[float, float]:
    """Seconds to remove ``rows`` old events: DROP of their partition vs DELETE of the rows."""
    bench_admin = make_conninfo(admin, dbname=BENCH_DB)
    day = datetime(2001, 1, 1, tzinfo=timezone.utc)
    ms0 = int(day.timestamp() * 1000)
    with psycopg.connect(bench_admin, autocommit=True) as conn:
        conn.execute("SET ROLE postbox_owner")
        conn.execute("SELECT postbox.outbox_ensure_partitions('1 day', '1 day', %s)", (day,))
        timings = []
        for mode in ("drop", "delete"):
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO postbox.outbox (id, aggregate_type, aggregate_id, event_type, payload) VALUES (%s, 'order', 'o', 'OrderPlaced', %s)",
                    [(uuid7(ms0 + i), b"\xc3\x01" + bytes(60)) for i in range(rows)],
                )
            started = time.perf_counter()
            if mode == "drop":
                conn.execute("DROP TABLE postbox.outbox_p20010101t000000")
            else:
                conn.execute("DELETE FROM postbox.outbox WHERE id < postbox.uuid7_bound(%s)", (day + timedelta(days=1),))
                conn.execute("VACUUM postbox.outbox_p20010101t000000")  # the deferred cost of DELETE
            timings.append(time.perf_counter() - started)
            if mode == "drop":
                conn.execute("SELECT postbox.outbox_ensure_partitions('1 day', '1 day', %s)", (day,))
        conn.execute("DROP TABLE postbox.outbox_p20010101t000000")
    return timings[0], timings[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short run (about 30 s)")
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--keep-db", action="store_true", help=f"keep the {BENCH_DB} database afterwards")
    args = parser.parse_args()
    seconds, rounds, batch = (2.0, 3, 10_000) if args.quick else (5.0, 5, 10_000)
    retention_rows = 20_000 if args.quick else 100_000

    admin = admin_url()
    url = setup(admin, Settings.load().database_url)
    codec = AvroCodec(SchemaRepository.load(ROOT / "schemas"))
    outboxes = (Outbox(codec=codec, retention=Retention.PARTITIONS), Outbox(codec=codec, retention=Retention.DELETE))
    payload = codec.encode("order", "OrderPlaced", PAYLOAD)
    kinds = ["base", "emit", "emit_delete", "base_plain", "emit_plain", *REFERENCE_SQL]
    results: dict[str, list[float]] = {k: [] for k in kinds}
    for r in range(rounds):
        order = kinds if r % 2 == 0 else list(reversed(kinds))  # interleave against drift
        for kind in order:
            results[kind].append(measure_tps(kind, url, outboxes, payload, args.clients, seconds))
    tps = {k: statistics.median(v) for k, v in results.items()}
    batch_rates = [measure_batch(url, outboxes[0], batch) for _ in range(rounds)]
    batch_eps = statistics.median(batch_rates)
    drop_s, delete_s = measure_retention(admin, retention_rows)

    figures = {
        "clients": args.clients,
        "seconds_per_round": seconds,
        "rounds": rounds,
        "base_tps": round(tps["base"], 1),
        "emit_tps": round(tps["emit"], 1),
        "emit_delete_tps": round(tps["emit_delete"], 1),
        "base_plain_tps": round(tps["base_plain"], 1),
        "emit_plain_tps": round(tps["emit_plain"], 1),
        "emit_tps_ratio": round(tps["emit"] / tps["base"], 3),
        "emit_delete_tps_ratio": round(tps["emit_delete"] / tps["base"], 3),
        "emit_separate_round_trip_tps_ratio": round(tps["emit_plain"] / tps["base_plain"], 3),
        "reference_tps": round(tps["reference"], 1),
        "reference_tps_ratio": round(tps["reference"] / tps["base"], 3),
        "emit_vs_reference": round(tps["emit"] / tps["reference"], 3),
        "reference_unpartitioned_tps_ratio": round(tps["reference_plain"] / tps["base"], 3),
        "partitioned_vs_unpartitioned": round(tps["reference"] / tps["reference_plain"], 3),
        "reference_message_tps_ratio": round(tps["reference_message"] / tps["base"], 3),
        "batch_size": batch,
        "batch_events_per_s": round(batch_eps, 1),
        "retention_rows": retention_rows,
        "retention_drop_partition_s": round(drop_s, 4),
        "retention_delete_and_vacuum_s": round(delete_s, 4),
    }
    print(f"{'scenario':<48}{'tx/s':>10}{'vs base':>10}")
    for label, kind, base in [
        ("business insert (pipeline)", "base", "base"),
        ("+ emit, same round trip [partitions]", "emit", "base"),
        ("+ emit + delete in tx [delete]", "emit_delete", "base"),
        ("business insert (no pipeline)", "base_plain", "base_plain"),
        ("+ emit as its own round trip", "emit_plain", "base_plain"),
        ("+ hand-made INSERT (reference) [partitioned]", "reference", "base"),
        ("+ hand-made INSERT, unpartitioned table", "reference_plain", "base"),
        ("+ pg_logical_emit_message(true, ...)", "reference_message", "base"),
    ]:
        print(f"{label:<48}{tps[kind]:>10.1f}{tps[kind] / tps[base]:>10.3f}")
    print(f"{'batch emit_many of ' + str(batch) + ' (events/s)':<48}{batch_eps:>10.1f}")
    print(f"{'retention of ' + str(retention_rows) + ' rows: DROP partition (s)':<48}{drop_s:>10.4f}")
    print(f"{'retention of ' + str(retention_rows) + ' rows: DELETE + VACUUM (s)':<48}{delete_s:>10.4f}")
    print(f"{'emit vs the hand-made reference':<48}{'':>10}{tps['emit'] / tps['reference']:>10.3f}")
    if not args.keep_db:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(BENCH_DB)))
    print(json.dumps(figures, sort_keys=True))


if __name__ == "__main__":
    main()
