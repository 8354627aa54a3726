"""Benchmark of the outbox writer: what an emit costs a business transaction, and batch throughput.

Runs against a scratch database ``postbox_bench`` on the cluster of POSTBOX_DATABASE_URL (created
and set up with ``postbox.db.init_database`` through the admin URL: POSTBOX_ADMIN_DATABASE_URL,
else the local stack's superuser socket). Writes as the app role, like an application.

Measured side by side in one run, 2 client processes (how: below), for these scenarios:

  base        business INSERT only                      (pipeline: BEGIN, then INSERT+COMMIT)
  emit        business INSERT + emit, same round trip   (retention: partitions; the default)
  emit_delete business INSERT + emit + DELETE           (retention: delete-in-transaction)
  base_plain  business INSERT only, no pipeline         (BEGIN, INSERT, COMMIT: 3 round trips)
  emit_plain  business INSERT + emit as its own round trip (no pipeline)
  emit_folded the business INSERT with the event folded into it (execute_and_emit: one statement)
  emit_general  ``emit`` with the payload taken through the general path (compiled check, then
              fastavro), as before the one-pass writer: the writer's speed-up in one run
  batch       emit_many of N events in one transaction (one binary COPY)
  batch_pipelined  the same inside a pipelined transaction (``outbox.transaction()``'s default),
              where psycopg cannot COPY: emit_many's INSERT form

and the pgbench-equivalent references (no postbox code: a hand-made statement, payload bytes and
ids made in advance), pipelined like ``emit``, so emit_vs_reference separates our cost from the
database's:

  reference        business INSERT + one hand-made outbox INSERT      (partitioned postbox.outbox)
  reference_plain  the same into an unpartitioned copy of the outbox  (partitioning's own cost)
  reference_check  the same into an unpartitioned copy whose rules are the table CHECK the outbox
                   had before (text columns) instead of domain types: the CHECK's own cost
  reference_message business INSERT + pg_logical_emit_message(true, ...)  (no table row at all)
  reference_folded the hand-made outbox INSERT folded into the business INSERT as a data-modifying
                   CTE (one statement: what execute_and_emit sends, without postbox), the database's
                   own figure for the folded form, as ``reference`` is for a separate statement

and, for batches, the same N events written by hand (ids and payload bytes made in advance, no
postbox code), each in one transaction, interleaved with ``batch``:

  batch_copy        COPY ... FROM STDIN (FORMAT BINARY)            (the fastest the database takes)
  batch_insert      the one-statement unnest INSERT emit_many sends where it cannot COPY
  batch_statements  one INSERT per event through one pipeline      (what emit_many sent before COPY)

and ``batch_before``: emit_many as it was before the one-pass writer (prepare_event per event, its payload through
the general path: compiled check, then fastavro; then one INSERT per event through one pipeline),
so the batch speed-up is a ratio of one run.

and the off-path cost of each retention: dropping a partition of R rows vs deleting them.

How a rate ratio is measured: the client processes live for the whole run, each with its own
connection warmed up once for every scenario, and run one short window (0.5 s; 0.4 s with
``--quick``) per command. A ratio (``emit_tps_ratio`` = emit / base, ...) comes from *paired
rounds*: in each round the two scenarios run in adjacent windows, the order alternating from round
to round, and the round's ratio is the one rate divided by the other; the figure is the median over
16 rounds (6 with ``--quick``), and ``tps_ratio_spread`` gives its quartiles, extremes and every
round's value. On a shared machine the load moves within seconds: a ratio of two medians taken
minutes apart carries those swings, a ratio within a round does not. A sanity check flags (a
printed WARNING and the JSON's ``warnings``, never an assertion) every figure whose scenario adds
work to the compared one yet beats it by more than the rounds' interquartile range: such a figure
is the run's noise, not a result.

What each scenario costs is measured apart from its rate: one connection runs the scenarios in
turns (blocks of transactions, interleaved) and sums the CPU time the client process and its
server backend spent on each (/proc/<pid>/schedstat). On a loaded shared machine rates swing by
tens of per cent between windows; these costs, and their ratios (``*_cpu_ratio``: what the rate
ratio is on a CPU-bound machine without other load), are steadier; ``cpu_ratio_spread`` gives the
block-by-block spread of each.

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
from collections.abc import Mapping
from typing import Any, NamedTuple

import psycopg

from postbox.stack.stack import admin_database_url
from psycopg import sql
from psycopg.conninfo import make_conninfo

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from postbox.codec import AvroCodec  # noqa: E402
from postbox.db import init_database  # noqa: E402
from postbox.outbox import NewEvent, Outbox, Retention  # noqa: E402
from postbox.outbox.rows import INSERT_SQL  # noqa: E402
from postbox.outbox.statements import CHUNK_MAX_ROWS, INSERT_MANY_SQL  # noqa: E402
from postbox.outbox.uuid7 import uuid7  # noqa: E402
from postbox.schemas import SchemaRepository  # noqa: E402
from postbox.schemas.repository import EventSchema  # noqa: E402
from postbox.settings import Settings  # noqa: E402
from postbox.stack.addresses import local_stack_env  # noqa: E402

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
CHECKED = "bench_outbox_check"
#: The outbox's rules as the table CHECK they were before the domains (the text of 050_deliverable.sql then).
OLD_CHECK = """CHECK (aggregate_type ~ '^[A-Za-z0-9._-]+$' AND length(aggregate_type) <= 232
    AND octet_length(aggregate_id) BETWEEN 1 AND 4096 AND length(event_type) BETWEEN 1 AND 255
    AND (traceparent IS NULL OR octet_length(traceparent) <= 512))"""
REFERENCE_SQL = {
    "reference": "INSERT INTO postbox.outbox (id, aggregate_type, aggregate_id, event_type, payload)"
                 " VALUES (%s, 'order', %s, 'OrderPlaced', %s)",
    "reference_plain": f"INSERT INTO {UNPARTITIONED} (id, aggregate_type, aggregate_id, event_type, payload)"
                       " VALUES (%s, 'order', %s, 'OrderPlaced', %s)",
    "reference_check": f"INSERT INTO {CHECKED} (id, aggregate_type, aggregate_id, event_type, payload)"
                       " VALUES (%s, 'order', %s, 'OrderPlaced', %s)",
    # A transactional logical decoding message: in the WAL with the commit, no row, no index.
    "reference_message": "SELECT pg_logical_emit_message(true, 'postbox.outbox', %s::bytea)",
}
#: The business INSERT with the hand-made outbox INSERT folded in (one statement), as execute_and_emit folds.
REFERENCE_FOLDED_SQL = ("WITH postbox_event AS (INSERT INTO postbox.outbox (id, aggregate_type, aggregate_id, event_type, payload)"
                        " VALUES (%s, 'order', %s, 'OrderPlaced', %s)) " + BUSINESS_SQL)


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
        conn.execute(f"DROP TABLE IF EXISTS {CHECKED}")
        conn.execute(f"CREATE TABLE {CHECKED} (id uuid PRIMARY KEY, aggregate_type text NOT NULL, aggregate_id text NOT NULL,"
                     " event_type text NOT NULL, payload bytea NOT NULL, created_at timestamptz NOT NULL DEFAULT clock_timestamp(),"
                     f" traceparent text, CONSTRAINT outbox_deliverable {OLD_CHECK})")
        conn.execute(f"GRANT INSERT ON {CHECKED} TO postbox_app")
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


class GeneralPathCodec(AvroCodec):
    """The codec as it encoded before the one-pass writer: compiled check, then fastavro."""

    def encode_with(self, schema: EventSchema, payload: Mapping[str, Any]) -> bytes:
        return self.encode_general(schema, payload)


Outboxes = tuple[Outbox, Outbox, Outbox]  # partitions, delete-in-transaction, general encode path


def one_tx(kind: str, conn: psycopg.Connection, outbox: Outbox, outbox_delete: Outbox, outbox_general: Outbox,
           ref: ReferenceRows, i: int) -> None:
    if kind in REFERENCE_SQL:
        with conn.pipeline(), conn.transaction():
            conn.execute(BUSINESS_SQL, ("c-1", i))
            conn.execute(REFERENCE_SQL[kind], ref.params(kind, i))
    elif kind == "reference_folded":
        with conn.pipeline(), conn.transaction():
            conn.execute(REFERENCE_FOLDED_SQL, (*ref.params("reference", i), "c-1", i))
    elif kind == "emit_folded":
        with conn.pipeline(), conn.transaction():
            outbox.execute_and_emit(conn, BUSINESS_SQL, ("c-1", i), "order", f"o-{i}", "OrderPlaced", PAYLOAD)
    elif kind in ("base", "emit", "emit_delete", "emit_general"):
        with conn.pipeline(), conn.transaction():
            conn.execute(BUSINESS_SQL, ("c-1", i))
            if kind == "emit":
                outbox.emit(conn, "order", f"o-{i}", "OrderPlaced", PAYLOAD)
            elif kind == "emit_general":
                outbox_general.emit(conn, "order", f"o-{i}", "OrderPlaced", PAYLOAD)
            elif kind == "emit_delete":
                outbox_delete.emit(conn, "order", f"o-{i}", "OrderPlaced", PAYLOAD)
    else:
        with conn.transaction():
            conn.execute(BUSINESS_SQL, ("c-1", i))
            if kind == "emit_plain":
                outbox.emit(conn, "order", f"o-{i}", "OrderPlaced", PAYLOAD)


class Cpu(NamedTuple):
    """CPU seconds spent so far by this client process and by its server backend.

    Why: on a shared machine a run's transaction rate swings with everyone else's load, while
    the CPU time a transaction costs (client and server process together) moves far less; on a
    CPU-bound machine the rate ratio of two scenarios is the inverse of their cost ratio.
    Both are read from /proc/<pid>/schedstat (nanoseconds on a CPU; the local stack's backend
    runs on this host), not from the 10 ms ticks of /proc/<pid>/stat.
    """

    client: float
    server: float

    @classmethod
    def now(cls, backend_pid: int) -> "Cpu":
        return cls(_on_cpu("self"), _on_cpu(str(backend_pid)))

    def __sub__(self, other: "Cpu") -> "Cpu":  # type: ignore[override]
        return Cpu(self.client - other.client, self.server - other.server)


def _on_cpu(pid: str) -> float:
    """Seconds process ``pid`` has run on a CPU (its main thread; a backend has no other)."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except OSError:  # the server is on another host: no server figure
        return float("nan")


class Round(NamedTuple):
    """One round of one scenario: work done per second, and CPU µs per unit of work."""

    rate: float
    client_us: float
    server_us: float


class Clients:
    """The benchmark's client *processes* (like pgbench's clients: threads would share one GIL and
    measure Python's lock instead of the database), kept for the whole run.

    Each has its own connection, warmed up once for every scenario (prepared statements, caches),
    and runs one measuring window per command: a scenario for a given time, all clients starting
    at the same instant. Keeping them makes a window cheap to start (no fork, no connect, no
    warm-up), so a run can afford many short windows, and two scenarios can be measured back to
    back, a few hundred milliseconds apart.
    """

    def __init__(self, kinds: list[str], url: str, outboxes: Outboxes, payload: bytes, clients: int) -> None:
        ctx = multiprocessing.get_context("fork")
        self.results: Any = ctx.Queue()
        self.commands: list[Any] = [ctx.Queue() for _ in range(clients)]
        self.procs = [ctx.Process(target=_client, args=(commands, self.results, kinds, url, outboxes, payload), daemon=True)
                      for commands in self.commands]
        for p in self.procs:
            p.start()
        for _ in self.procs:
            self._get(120.0)

    def _get(self, timeout: float) -> Any:
        status, detail = self.results.get(timeout=timeout)
        if status == "error":
            self.close()
            raise RuntimeError(f"a client failed: {detail}")
        return detail

    def window(self, kind: str, seconds: float) -> Round:
        """Committed transactions per second of ``kind`` over all clients in one window, and the CPU
        each transaction cost in the clients and their server backends."""
        start_at = time.monotonic() + 0.005  # CLOCK_MONOTONIC: one clock for every process
        for commands in self.commands:
            commands.put((kind, start_at, seconds))
        outcomes = [self._get(seconds + 60) for _ in self.procs]
        done = sum(n for n, _elapsed, _cpu in outcomes)
        client = sum(cpu.client for _n, _elapsed, cpu in outcomes)
        server = sum(cpu.server for _n, _elapsed, cpu in outcomes)
        return Round(sum(n / elapsed for n, elapsed, _cpu in outcomes), client / done * 1e6, server / done * 1e6)

    def close(self) -> None:
        for commands in self.commands:
            commands.put(None)
        for p in self.procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()


def _client(commands: Any, results: Any, kinds: list[str], url: str, outboxes: Outboxes, payload: bytes) -> None:
    """One client process: warm up every scenario, then run the windows it is sent until None."""
    try:
        ref = ReferenceRows(payload)
        with psycopg.connect(url) as conn:
            pid = conn.info.backend_pid
            for k, kind in enumerate(kinds):
                for w in range(20):  # negative numbers, none shared by two scenarios (reference ids)
                    one_tx(kind, conn, *outboxes, ref, -1 - w - 20 * k)
            results.put(("ok", None))
            n = 0  # counts on across windows: the reference ids stay unique
            while (command := commands.get()) is not None:
                kind, start_at, seconds = command
                while time.monotonic() < start_at:
                    time.sleep(0.0002)
                before = Cpu.now(pid)
                started = time.monotonic()
                stop = started + seconds
                first = n
                while time.monotonic() < stop:
                    one_tx(kind, conn, *outboxes, ref, n)
                    n += 1
                elapsed = time.monotonic() - started
                results.put(("ok", (n - first, elapsed, Cpu.now(pid) - before)))
    except BaseException as exc:  # noqa: BLE001 - reported by the parent
        results.put(("error", repr(exc)))


class Spread(NamedTuple):
    """Per-round ratios summed up: the median is the figure, the quartiles and extremes its spread."""

    median: float
    q1: float
    q3: float
    low: float
    high: float
    n: int
    rounds: tuple[float, ...]

    @classmethod
    def of(cls, values: list[float]) -> "Spread":
        ordered = sorted(values)
        if len(ordered) < 2:
            v = ordered[0]
            return cls(v, v, v, v, v, 1, tuple(values))
        q1, _median, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
        return cls(statistics.median(ordered), q1, q3, ordered[0], ordered[-1], len(ordered), tuple(values))

    def json(self) -> dict[str, Any]:
        """Its figures, and each round's ratio in the order the rounds ran (to see a drift or a jump)."""
        return {"median": round(self.median, 3), "q1": round(self.q1, 3), "q3": round(self.q3, 3),
                "min": round(self.low, 3), "max": round(self.high, 3), "n": self.n,
                "rounds": [round(v, 3) for v in self.rounds]}


def measure_pairs(clients: Clients, pairs: list[tuple[str, str]], rounds: int,
                  seconds: float) -> tuple[dict[tuple[str, str], Spread], dict[str, list[Round]]]:
    """Rate ratios of ``pairs`` (scenario, compared with) from many short paired windows.

    Why paired: on a shared machine the load moves within seconds, so a ratio of medians taken
    over windows far apart carries the load's swings. Here each round runs the two scenarios of a
    pair in adjacent windows (order alternated, so neither always runs second), and the ratio is
    taken within the round: the load falls on both alike. The median over the rounds is the
    figure; the quartiles and extremes say how far to trust it.
    """
    ratios_by_pair: dict[tuple[str, str], list[float]] = {pair: [] for pair in pairs}
    windows: dict[str, list[Round]] = {}
    for r in range(rounds):
        for p, (kind, other) in enumerate(pairs):
            order = (other, kind) if (r + p) % 2 == 0 else (kind, other)
            got = {k: clients.window(k, seconds) for k in order}
            ratios_by_pair[(kind, other)].append(got[kind].rate / got[other].rate)
            for k, w in got.items():
                windows.setdefault(k, []).append(w)
        print(f"writer bench: round {r + 1}/{rounds} of {len(pairs)} paired windows", file=sys.stderr, flush=True)
    return {pair: Spread.of(v) for pair, v in ratios_by_pair.items()}, windows


def cost_us(rounds: list[Round]) -> tuple[float, float]:
    """Median client and server CPU µs per unit of work over the rounds."""
    return statistics.median(r.client_us for r in rounds), statistics.median(r.server_us for r in rounds)


class Costs(NamedTuple):
    """What :func:`measure_costs` found: CPU µs per transaction of each scenario [client, server]
    over all its blocks, and each block's total (client + server) µs per transaction, in order."""

    mean: dict[str, tuple[float, float]]
    blocks: dict[str, list[float]]

    def ratio_spread(self, kind: str, other: str) -> Spread:
        """``other``'s cost ÷ ``kind``'s, block by block (block b of each ran in the same sweep)."""
        return Spread.of([o / k for k, o in zip(self.blocks[kind], self.blocks[other])])


def measure_costs(kinds: list[str], url: str, outboxes: Outboxes, payload: bytes, blocks: int, block: int) -> Costs:
    """CPU µs per transaction of each scenario, client and server backend, on one connection.

    The scenarios take turns in blocks of ``block`` transactions, ``blocks`` times each, and the
    CPU of all of a scenario's blocks is summed: whatever else the machine does meanwhile falls
    on every scenario alike, so the ratios hold on a loaded machine where rates do not.
    """
    spent = {k: Cpu(0.0, 0.0) for k in kinds}
    per_block: dict[str, list[float]] = {k: [] for k in kinds}
    ref = ReferenceRows(payload)
    n = 0
    with psycopg.connect(url) as conn:
        pid = conn.info.backend_pid
        for k, kind in enumerate(kinds):
            for w in range(20):  # warm up; negative numbers, none shared by two scenarios (ids)
                one_tx(kind, conn, *outboxes, ref, -1 - w - 20 * k)
        for b in range(blocks):
            for kind in kinds if b % 2 == 0 else reversed(kinds):
                before = Cpu.now(pid)
                for _ in range(block):
                    one_tx(kind, conn, *outboxes, ref, n)
                    n += 1
                used = Cpu.now(pid) - before
                spent[kind] = Cpu(spent[kind].client + used.client, spent[kind].server + used.server)
                per_block[kind].append((used.client + used.server) / block * 1e6)
    done = blocks * block
    return Costs({k: (c.client / done * 1e6, c.server / done * 1e6) for k, c in spent.items()}, per_block)


BATCH_KINDS = ("batch", "batch_pipelined", "batch_before", "batch_copy", "batch_insert", "batch_statements")
COPY_SQL = "COPY postbox.outbox (id, aggregate_type, aggregate_id, event_type, payload, traceparent) FROM STDIN (FORMAT BINARY)"


def measure_batch(kind: str, url: str, outboxes: Outboxes, payload: bytes, size: int) -> Round:
    """Events per second of one transaction writing ``size`` events the way ``kind`` says, and CPU µs per event."""
    events = [NewEvent("order", f"o-{i % 100}", "OrderPlaced", PAYLOAD) for i in range(size)]
    rows = [(uuid7(), "order", f"o-{i % 100}", "OrderPlaced", payload, None) for i in range(size)]
    with psycopg.connect(url) as conn:
        before = Cpu.now(conn.info.backend_pid)
        started = time.perf_counter()
        with conn.transaction():
            if kind == "batch":
                outboxes[0].emit_many(conn, events)
            elif kind == "batch_pipelined":
                with conn.pipeline():
                    outboxes[0].emit_many(conn, events)
            elif kind == "batch_before":
                prepared = [outboxes[2].rows.prepare_event(e) for e in events]
                with conn.pipeline(), conn.cursor() as cur:
                    cur.executemany(INSERT_SQL, [r.params for r in prepared])
            elif kind == "batch_copy":
                with conn.cursor().copy(COPY_SQL) as copy:
                    copy.set_types(["uuid", "text", "text", "text", "bytea", "text"])
                    for row in rows:
                        copy.write_row(row)
            elif kind == "batch_insert":
                for start in range(0, size, CHUNK_MAX_ROWS):
                    chunk = rows[start:start + CHUNK_MAX_ROWS]
                    conn.execute(INSERT_MANY_SQL, tuple(list(col) for col in zip(*chunk)))
            else:
                with conn.pipeline(), conn.cursor() as cur:
                    cur.executemany(INSERT_SQL, rows)
        elapsed = time.perf_counter() - started
        cpu = Cpu.now(conn.info.backend_pid) - before
        return Round(size / elapsed, cpu.client / size * 1e6, cpu.server / size * 1e6)


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


#: The ratios of the JSON line: (rate figure, CPU figure or None, scenario, compared with). The
#: rate figure is scenario ÷ compared-with; the CPU figure is compared-with's cost ÷ the scenario's,
#: so both read "above 1: the scenario is faster/cheaper".
RATIOS = [
    ("emit_tps_ratio", "emit_cpu_ratio", "emit", "base"),
    ("emit_general_tps_ratio", "emit_general_cpu_ratio", "emit_general", "base"),
    ("emit_vs_general", "emit_vs_general_cpu", "emit", "emit_general"),
    ("emit_folded_tps_ratio", "emit_folded_cpu_ratio", "emit_folded", "base"),
    ("reference_folded_tps_ratio", "reference_folded_cpu_ratio", "reference_folded", "base"),
    ("emit_folded_vs_reference_folded", "emit_folded_vs_reference_folded_cpu", "emit_folded", "reference_folded"),
    ("emit_delete_tps_ratio", "emit_delete_cpu_ratio", "emit_delete", "base"),
    ("emit_separate_round_trip_tps_ratio", "emit_separate_round_trip_cpu_ratio", "emit_plain", "base_plain"),
    ("reference_tps_ratio", "reference_cpu_ratio", "reference", "base"),
    ("emit_vs_reference", "emit_vs_reference_cpu", "emit", "reference"),
    ("reference_unpartitioned_tps_ratio", "reference_unpartitioned_cpu_ratio", "reference_plain", "base"),
    ("partitioned_vs_unpartitioned", "partitioned_vs_unpartitioned_cpu", "reference", "reference_plain"),
    ("reference_message_tps_ratio", "reference_message_cpu_ratio", "reference_message", "base"),
    ("reference_message_vs_reference", "reference_message_vs_reference_cpu", "reference_message", "reference"),
    ("domains_vs_check", "domains_vs_check_cpu", "reference_plain", "reference_check"),
    ("reference_check_tps_ratio", "reference_check_cpu_ratio", "reference_check", "base"),
]
#: Rate figures whose scenario does everything the compared-with one does and more: it cannot
#: honestly run faster, so a run where it does by more than its spread is flagged as noise.
ADDS_WORK = {"emit_tps_ratio", "emit_general_tps_ratio", "emit_folded_tps_ratio", "reference_folded_tps_ratio",
             "emit_delete_tps_ratio", "emit_separate_round_trip_tps_ratio", "reference_tps_ratio",
             "reference_unpartitioned_tps_ratio", "reference_message_tps_ratio", "reference_check_tps_ratio"}
BATCH_RATIOS = [
    ("batch_vs_copy", "batch_vs_copy_cpu", "batch", "batch_copy"),
    ("batch_vs_hand_insert", None, "batch", "batch_insert"),
    ("batch_vs_statements", None, "batch", "batch_statements"),
    ("batch_vs_before", "batch_vs_before_cpu", "batch", "batch_before"),
    ("batch_pipelined_vs_hand_insert", None, "batch_pipelined", "batch_insert"),
]


def cpu_figure_of(rate_figure: str) -> str | None:
    return next((cpu for rate, cpu, _k, _o in RATIOS if rate == rate_figure), None)


def sanity_warnings(spreads: Mapping[str, Spread], names: Mapping[str, str]) -> list[str]:
    """A figure of ADDS_WORK above 1 by more than its spread (the rounds' interquartile range): the
    scenario that adds work beat the one without it, which says the run's noise, not the code."""
    out = []
    for figure, spread in spreads.items():
        rate_figure = names.get(figure, figure)
        if rate_figure in ADDS_WORK and spread.median - 1 > spread.q3 - spread.q1:
            out.append(f"{figure} = {spread.median:.3f} (rounds' IQR {spread.q1:.3f}-{spread.q3:.3f}): a scenario that "
                       "adds work beat the one without it by more than its spread; this figure is noise, not a result")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short run (about 2 min)")
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--rounds", type=int, help="paired rounds of the rate ratios (default 6; 16 without --quick)")
    parser.add_argument("--window", type=float, help="seconds of one rate window (default 0.4; 0.5 without --quick)")
    parser.add_argument("--keep-db", action="store_true", help=f"keep the {BENCH_DB} database afterwards")
    args = parser.parse_args()
    seconds, rounds, batch_rounds, batch = (0.4, 6, 3, 10_000) if args.quick else (0.5, 16, 5, 10_000)
    seconds = args.window or seconds
    rounds = args.rounds or rounds
    retention_rows = 20_000 if args.quick else 100_000

    admin = admin_url()
    url = setup(admin, Settings.load(local=local_stack_env()).database_url)
    codec = AvroCodec(SchemaRepository.load(ROOT / "schemas"))
    outboxes = (Outbox(codec=codec, retention=Retention.PARTITIONS), Outbox(codec=codec, retention=Retention.DELETE),
                Outbox(codec=GeneralPathCodec(codec.repository), retention=Retention.PARTITIONS))
    payload = codec.encode("order", "OrderPlaced", PAYLOAD)
    load_before = os.getloadavg()
    kinds = ["base", "emit", "emit_general", "emit_folded", "emit_delete", "base_plain", "emit_plain", *REFERENCE_SQL,
             "reference_folded"]
    pairs = [(kind, other) for _rate, _cpu, kind, other in RATIOS]
    clients = Clients(kinds, url, outboxes, payload, args.clients)
    try:
        pair_spreads, windows = measure_pairs(clients, pairs, rounds, seconds)
    finally:
        clients.close()
    load_rates = os.getloadavg()
    tps = {k: statistics.median(r.rate for r in v) for k, v in windows.items()}
    rate_spread = {rate: pair_spreads[(kind, other)] for rate, _cpu, kind, other in RATIOS}
    blocks, block = (10, 200) if args.quick else (30, 300)
    costs = measure_costs(kinds, url, outboxes, payload, blocks, block)
    cost = costs.mean
    total = {k: sum(c) for k, c in cost.items()}
    cpu_spread = {cpu: costs.ratio_spread(kind, other) for _rate, cpu, kind, other in RATIOS if cpu is not None}
    load_costs = os.getloadavg()
    batch_rates: dict[str, list[Round]] = {k: [] for k in BATCH_KINDS}
    for r in range(batch_rounds):
        for kind in BATCH_KINDS if r % 2 == 0 else reversed(BATCH_KINDS):
            batch_rates[kind].append(measure_batch(kind, url, outboxes, payload, batch))
    eps = {k: statistics.median(r.rate for r in v) for k, v in batch_rates.items()}
    batch_cost = {k: cost_us(v) for k, v in batch_rates.items()}
    batch_spread = {rate: Spread.of([a.rate / b.rate for a, b in zip(batch_rates[kind], batch_rates[other])])
                    for rate, _cpu, kind, other in BATCH_RATIOS}
    load_after = os.getloadavg()
    drop_s, delete_s = measure_retention(admin, retention_rows)
    warnings = sanity_warnings(rate_spread, {}) + sanity_warnings(
        cpu_spread, {cpu: rate for rate, cpu, _k, _o in RATIOS if cpu is not None})

    figures = {
        "clients": args.clients,
        "window_seconds": seconds,
        "rounds": rounds,
        **{f"{kind}_tps": round(tps[kind], 1) for kind in ("base", "emit", "emit_delete", "base_plain", "emit_plain",
                                                            "emit_folded", "reference", "reference_folded")},
        # Rate figures: the median of the per-round ratios of paired windows; CPU figures: the
        # ratio of all blocks' costs (their block-by-block spread in cpu_ratio_spread).
        **{rate: round(spread.median, 3) for rate, spread in rate_spread.items()},
        **{cpu: round(total[other] / total[kind], 3)
           for _rate, cpu, kind, other in RATIOS if cpu is not None},
        "tps_ratio_spread": {rate: spread.json() for rate, spread in rate_spread.items()},
        "cpu_ratio_spread": {cpu: spread.json() for cpu, spread in cpu_spread.items()},
        "warnings": warnings,
        "batch_size": batch,
        "batch_rounds": batch_rounds,
        **{f"{kind}_events_per_s": round(eps[kind], 1) for kind in BATCH_KINDS},
        **{rate: round(eps[kind] / eps[other], 3) for rate, _cpu, kind, other in BATCH_RATIOS},
        **{cpu: round(sum(batch_cost[other]) / sum(batch_cost[kind]), 3)
           for _rate, cpu, kind, other in BATCH_RATIOS if cpu is not None},
        "batch_ratio_spread": {rate: spread.json() for rate, spread in batch_spread.items()},
        # 1-minute load average at the start, after the rate windows, after the CPU blocks, at the end.
        "load_average_1m": [round(x[0], 1) for x in (load_before, load_rates, load_costs, load_after)],
        # CPU µs per transaction (one connection, scenarios interleaved in blocks; per event for
        # batches): [client, server backend]; their ratios are what the rate ratios would be on a
        # CPU-bound machine with no other load.
        "cost_blocks": [blocks, block],
        "cpu_us": {k: [round(c, 1), round(sv, 1)] for k, (c, sv) in {**cost, **batch_cost}.items()},
        "cpus": os.cpu_count(),
        "retention_rows": retention_rows,
        "retention_drop_partition_s": round(drop_s, 4),
        "retention_delete_and_vacuum_s": round(delete_s, 4),
    }
    print(f"rate: median of {rounds} paired rounds of {seconds:g} s windows (IQR: the rounds' quartiles); "
          f"CPU: all {blocks} blocks of {block} transactions per scenario on one connection (IQR: block by block)")
    print(f"{'scenario':<46}{'tx/s':>9}{'vs base':>9}{'IQR':>13}{'client µs':>10}{'server µs':>10}"
          f"{'cpu vs base':>12}{'IQR':>13}")
    for label, kind, figure in TABLE:
        rate = rate_spread.get(figure) if figure else None
        cpu_name = cpu_figure_of(figure) if figure else None
        cpu = cpu_spread.get(cpu_name) if cpu_name else None
        print(f"{label:<46}{tps[kind]:>9.1f}{_median(rate):>9}{_iqr(rate):>13}{cost[kind][0]:>10.1f}"
              f"{cost[kind][1]:>10.1f}{_figure(figures, cpu_name):>12}{_iqr(cpu):>13}")
    for label, figure in [("emit vs the hand-made reference", "emit_vs_reference"),
                          ("execute_and_emit vs the hand-made folded CTE", "emit_folded_vs_reference_folded"),
                          ("partitioned vs unpartitioned (hand-made)", "partitioned_vs_unpartitioned"),
                          ("domains vs the old table CHECK (hand-made)", "domains_vs_check")]:
        cpu = cpu_spread.get(cpu_figure_of(figure) or "")
        print(f"{label:<46}{'':>9}{_median(rate_spread[figure]):>9}{_iqr(rate_spread[figure]):>13}{'':>20}"
              f"{_figure(figures, cpu_figure_of(figure)):>12}{_iqr(cpu):>13}")
    print(f"{'batch of ' + str(batch) + ' events (events/s)':<46}{'':>9}{'ratio':>9}{'IQR':>13}{'client µs':>10}"
          f"{'server µs':>10}{'cpu ratio':>12}")
    for label, kind, figure in [("batch emit_many (COPY)", "batch", None), ("  emit_many as before", "batch_before", "batch_vs_before"),
                                ("  emit_many pipelined (INSERT) vs hand-made", "batch_pipelined", "batch_pipelined_vs_hand_insert"),
                                ("  hand-made COPY (binary)", "batch_copy", "batch_vs_copy"),
                                ("  hand-made unnest INSERT", "batch_insert", "batch_vs_hand_insert"),
                                ("  one INSERT per event, pipelined", "batch_statements", "batch_vs_statements")]:
        spread = batch_spread.get(figure) if figure else None
        print(f"{label:<46}{eps[kind]:>9.1f}{_median(spread):>9}{_iqr(spread):>13}"
              f"{batch_cost[kind][0]:>10.1f}{batch_cost[kind][1]:>10.1f}"
              f"{sum(batch_cost[kind]) / sum(batch_cost['batch']):>12.3f}")
    print(f"{'retention of ' + str(retention_rows) + ' rows: DROP partition (s)':<46}{drop_s:>9.4f}")
    print(f"{'retention of ' + str(retention_rows) + ' rows: DELETE + VACUUM (s)':<46}{delete_s:>9.4f}")
    print("load average (1 min) at start / after rates / after CPU blocks / at end: "
          + " / ".join(f"{x:.1f}" for x in figures["load_average_1m"]) + f" on {os.cpu_count()} CPUs")
    for warning in warnings:
        print(f"WARNING: {warning}")
    if not args.keep_db:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(BENCH_DB)))
    print(json.dumps(figures, sort_keys=True))


#: The table's rows: label, scenario, and the rate figure comparing it with its base (None: a base).
TABLE = [
    ("business insert (pipeline)", "base", None),
    ("+ emit, same round trip [partitions]", "emit", "emit_tps_ratio"),
    ("+ emit, payload through the general path", "emit_general", "emit_general_tps_ratio"),
    ("+ emit folded into it (execute_and_emit)", "emit_folded", "emit_folded_tps_ratio"),
    ("+ emit + delete in tx [delete]", "emit_delete", "emit_delete_tps_ratio"),
    ("business insert (no pipeline)", "base_plain", None),
    ("+ emit as its own round trip", "emit_plain", "emit_separate_round_trip_tps_ratio"),
    ("+ hand-made INSERT (reference) [partitioned]", "reference", "reference_tps_ratio"),
    ("+ hand-made INSERT, unpartitioned table", "reference_plain", "reference_unpartitioned_tps_ratio"),
    ("+ the same, old table CHECK, no domains", "reference_check", "reference_check_tps_ratio"),
    ("+ pg_logical_emit_message(true, ...)", "reference_message", "reference_message_tps_ratio"),
    ("+ hand-made INSERT folded into it (CTE)", "reference_folded", "reference_folded_tps_ratio"),
]


def _median(spread: Spread | None) -> str:
    return "" if spread is None else f"{spread.median:.3f}"


def _figure(figures: Mapping[str, Any], name: str | None) -> str:
    """A CPU figure as the JSON has it (all blocks' costs, not the median block's ratio)."""
    return "" if name is None else f"{figures[name]:.3f}"


def _iqr(spread: Spread | None) -> str:
    return "" if spread is None else f"{spread.q1:.3f}-{spread.q3:.3f}"


if __name__ == "__main__":
    main()
