"""Benchmark: commit-to-apply latency and throughput of the whole pipeline, CDC vs a polling publisher.

    python bench/e2e.py [--quick] [--rates 100,1000] [--duration S] [--reps N] [--no-search]
                        [--poll-interval-ms 100] [--batch-size N] [--batch-wait-ms N] [--json-only]
                        [--replica-waits]

Two paths from a committed business transaction to an effect acknowledged by Redis, measured in
the same run, at the same rates, against the same stack (POSTBOX_* settings; the admin URL from
``postbox.stack.stack.admin_database_url()``):

* **cdc**: the writer (``postbox.outbox.Outbox.transaction``, one event per transaction, psycopg
  pipeline mode) inserts into ``postbox.outbox``; PostgreSQL's logical decoding → the Debezium
  connector and the Outbox Event Router on Kafka Connect → Kafka → the consumer runtime → Redis.
* **polling**: the same writer code inserts into ``postbox.outbox`` of a scratch database
  (``postbox_bench_polling``, with a ``published_at`` column); the relay of
  ``bench/polling_publisher.py`` polls it (``FOR UPDATE SKIP LOCKED``), produces router-identical
  records with confluent-kafka, marks them published → Kafka → the same consumer → Redis.

One consumer process (``ConsumerRuntime``, the consumer defaults unless flags say otherwise, one
group, both topics, 3 partitions each) applies both paths: a HINCRBY per event with dedupe, in the
shared Redis (AOF ``appendfsync always``: an acknowledged apply is on disk). Through the runtime's
public observer (``ConsumerRuntime(observer=...)``, :mod:`postbox.consumer.observation`) it records,
per event id, when its batch's apply was acknowledged by Redis, the record's Kafka timestamp, the
time its batch came out of ``consume()`` and the ``created_at`` header. One emitter process (threads, one connection each, open-loop schedule) records per event id
the time its COMMIT returned to the application.

**Latency** = apply acknowledged − COMMIT returned, per event (both wall clocks of this machine).
That is "from commit" as the application sees it; ``created_at`` (``clock_timestamp()`` at the
INSERT, i.e. *before* the commit and its WAL flush) is reported next to it as ``from_created``:
it is larger by the commit's own duration. The split of the CDC latency (``commit → Kafka
timestamp → out of consume() → acked``) shows where the time goes.

**Sustainable** rate: the emitter held the rate (≥ 97 % of the target) and the backlog (events
committed but not yet applied) stayed bounded: its mean over the last quarter of the run is at most
its mean over the second quarter plus 0.25 s of events, and everything was applied within the
drain timeout. The highest sustainable rate is searched in steps of 1.5x from 1,000/s, then by bisection.
A rate the emitter itself cannot produce is reported as emitter-bound (a lower bound).

Also per run: the consumer group's maximum lag (``postbox lag``'s code), the replication slot's
maximum lag in WAL bytes (polling: the most unpublished rows), CPU per component (``/proc/<pid>/stat``
utime+stime: PostgreSQL = the postmaster and all its children, including other clients' backends on
a shared stack; Kafka; Connect; Redis; the consumer; the emitter; the relay), and PostgreSQL write
load (pg_stat_user_tables of each path's outbox: inserts, updates, dead row versions made, vacuums; WAL bytes from
``pg_current_wal_lsn()``, cluster-wide, so other clients of a shared cluster add to it).

The polling path runs with ``--poll-interval-ms`` (default 100 ms, a common relay default) and, in
full runs, also with each of ``--extra-poll-intervals`` (default 10 ms) as path ``polling<N>ms``:
the relay's poll interval is its latency-versus-load knob. ``cpu_stall`` is the share of the run
during which some runnable task on the machine waited for a CPU (``/proc/pressure/cpu``): on a
2-core machine running everything, the latency tail follows it.

**Replica waits** (``--replica-waits``): the consumer applies on a private Redis primary with a
replica (``bench/replica_pair.py``, ``postbox.testing.RedisServer``) with ``--redis-replicas 0``,
and a second consumer (its own group, the cdc topic only) applies the same records on the same
primary with ``--redis-replicas 1`` (``WAIT 1`` before each commit); each cdc run reports both
consumers' latencies of the same events, side by side (``cdc_wait_p99_ms_at_<rate>``,
``cdc_wait_vs_cdc_p99_at_<rate>``). Both consumers share the machine, so each figure is under the
other's load too.

At the end it waits until every committed event was observed applied and exits 1 when either
path counted fewer applied events than were committed (``bench/counting.py``): a bench whose
observation broke must not pass for a result.

Prints tables, then as its LAST line one JSON object (``cdc_p99_ms_at_1000``,
``polling_p99_ms_at_1000``, ``cdc_max_rate``, ``polling_max_rate``, ... ; medians over ``--reps``).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))
from counting import require_full_counts  # noqa: E402
from replica_pair import ReplicatedRedis  # noqa: E402
POLL_DB = "postbox_bench_polling"
PATHS = ("cdc", "polling")
AGGREGATES = 1000
PARTITIONS = 3
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAYLOAD_ITEMS = [{"sku": "tea", "quantity": 2, "unit_price_cents": 450}, {"sku": "cup", "quantity": 1, "unit_price_cents": 900}]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# The consumer process: ConsumerRuntime + per-event timestamps
# ---------------------------------------------------------------------------------------------


def consumer_main(pipe: Any, cfg: dict[str, Any], applied: Any) -> None:
    """Run the consumer runtime in a thread; answer ``dump``/``stop`` on ``pipe``.

    What is measured comes from the runtime's public observer (``ConsumerRuntime(observer=...)``):
    per settled record its event id, topic, created_at, Kafka timestamp, when its batch came out of
    ``consume()`` and when Redis acknowledged its apply. ``applied[i]`` counts path ``i``'s records
    observed as applied (the run's progress and the final count); duplicates are counted apart."""
    from postbox.consumer import App, ConsumerConfig, ConsumerRuntime, Observed
    from postbox.consumer.observation import APPLIED, DUPLICATE
    from postbox.effects import aggregate_keys

    paths = {topic: i for i, topic in enumerate(cfg["topics"])}
    lock = threading.Lock()
    #: event id -> (path index, created_at, kafka timestamp, out of consume(), acknowledged)
    records: dict[str, tuple[int, float | None, float, float, float]] = {}
    duplicates = [0, 0]
    others = [0]  # dead-lettered (never expected here)

    def observe(settled: "list[Observed]") -> None:
        with lock:
            for o in settled:
                index = paths.get(o.topic)
                if index is None or o.event_id is None:
                    continue
                if o.outcome == APPLIED:
                    created = o.created_at.timestamp() if o.created_at is not None else None
                    kafka_ts = o.kafka_timestamp_ms / 1000 if o.kafka_timestamp_ms is not None else float("nan")
                    records[o.event_id] = (index, created, kafka_ts, o.batch_received, o.acknowledged)
                    applied[index] += 1
                elif o.outcome == DUPLICATE:
                    duplicates[index] += 1
                else:
                    others[0] += 1

    app = App(cfg["group"], schemas_dir=cfg["schemas"])

    def handler(event: Any, fx: Any) -> None:
        fx.hincrby(aggregate_keys(event.aggregate_type, event.aggregate_id)("totals"), "cents", event.payload["total_cents"])

    for agg in cfg["aggregates"]:
        app.handler(agg, "OrderPlaced")(handler)
    flags = {k: cfg[k] for k in ("batch_size", "batch_wait_ms", "redis_replicas") if cfg.get(k) is not None}
    config = ConsumerConfig.load({}, app=app, group=cfg["group"], topics=",".join(cfg["topics"]),
                                 kafka_bootstrap=cfg["bootstrap"], redis_url=cfg["redis_url"], **flags)
    runtime = ConsumerRuntime(app, config, install_signals=False, kafka_overrides=cfg.get("kafka_overrides") or {}, observer=observe)
    thread = threading.Thread(target=runtime.run, name="runtime", daemon=True)
    thread.start()
    deadline = time.monotonic() + 90
    while len(runtime.states) < len(cfg["topics"]) * PARTITIONS and time.monotonic() < deadline and thread.is_alive():
        time.sleep(0.05)
    pipe.send(("ready", len(runtime.states), config.describe()))
    while True:
        cmd = pipe.recv()
        if cmd[0] == "dump":
            index = cmd[1]
            with lock:
                done = {k: v for k, v in records.items() if v[0] == index}
                for k in done:
                    del records[k]
                dups = duplicates[index]
                duplicates[index] = 0
            pipe.send((done, 0, dups))
        elif cmd[0] == "stop":
            runtime.stop()
            thread.join(60)
            pipe.send(("stopped", others[0]))
            return


# ---------------------------------------------------------------------------------------------
# The emitter process: the writer, one event per transaction, open-loop schedule
# ---------------------------------------------------------------------------------------------


def emitter_main(pipe: Any, committed: Any) -> None:
    import psycopg

    from postbox.codec import AvroCodec
    from postbox.outbox import Outbox
    from postbox.schemas import SchemaRepository

    conns: dict[tuple[str, int], Any] = {}
    outboxes: dict[str, Outbox] = {}
    count_lock = threading.Lock()
    pipe.send(("ready",))
    while True:
        cmd = pipe.recv()
        if cmd[0] == "stop":
            for conn in conns.values():
                conn.close()
            return
        _, index, dsn, agg, schemas, rate, duration, threads, t0 = cmd
        outbox = outboxes.get(schemas) or outboxes.setdefault(schemas, Outbox(codec=AvroCodec(SchemaRepository.load(schemas))))
        total = int(rate * duration)
        for t in range(threads):
            if (dsn, t) not in conns or conns[(dsn, t)].closed:
                conns[(dsn, t)] = psycopg.connect(dsn)
        out: list[list[tuple[str, float, float]]] = [[] for _ in range(threads)]
        placed_at = datetime.now(timezone.utc)

        def work(t: int) -> None:
            conn = conns[(dsn, t)]
            mine = out[t]
            for k in range(t, total, threads):
                due = t0 + k / rate
                delay = due - time.time()
                if delay > 0:
                    time.sleep(delay)
                order_id = f"o{k % AGGREGATES}"
                payload = {"order_id": order_id, "customer_id": "c-1", "items": PAYLOAD_ITEMS, "total_cents": k % 1000,
                           "placed_at": placed_at, "currency": "EUR", "coupon": None}
                began = time.time()
                with outbox.transaction(conn) as tx:
                    event = tx.emit(agg, order_id, "OrderPlaced", payload)
                mine.append((str(event.id), time.time(), began))
                with count_lock:
                    committed[index] += 1

        workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        # Close after each run: a backend reports its table statistics when it exits (an idle one
        # only every 10 s), and the bench reads pg_stat_user_tables right after the run.
        for t in range(threads):
            conns.pop((dsn, t)).close()
        pipe.send([r for part in out for r in part])


# ---------------------------------------------------------------------------------------------
# Measuring: CPU from /proc, percentiles
# ---------------------------------------------------------------------------------------------


def _stat(pid: int) -> tuple[int, float, float] | None:
    """(ppid, utime+stime, cutime+cstime) in seconds, or None when the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    # fields[0] is state (field 3); ppid is field 4; utime..cstime are fields 14..17
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / CLK_TCK, (int(fields[13]) + int(fields[14])) / CLK_TCK


def tree_cpu(root: int) -> float:
    """CPU seconds of ``root`` and its direct children, plus the children it has already reaped."""
    own = _stat(root)
    if own is None:
        return 0.0
    total = own[1] + own[2]
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != root:
            st = _stat(int(entry.name))
            if st is not None and st[0] == root:
                total += st[1]
    return total


def cpu_pressure_us() -> float | None:
    """Total µs during which some runnable task waited for a CPU (Linux PSI), or None."""
    try:
        line = Path("/proc/pressure/cpu").read_text().splitlines()[0]
        return float(line.rsplit("total=", 1)[1])
    except (OSError, IndexError, ValueError):
        return None


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    k = (len(values) - 1) * p / 100
    lo, hi = math.floor(k), math.ceil(k)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def latencies(result: "RunResult", emitted: list[tuple[str, float, float]], done: dict[str, Any]) -> "RunResult":
    """``result`` with the commit-to-acknowledged latencies of ``emitted`` (event id, COMMIT
    returned, began) found in ``done`` (a consumer's dump), and the count of the others."""
    lat = [(rec[4] - committed_at) * 1000 for event_id, committed_at, _began in emitted if (rec := done.get(event_id)) is not None]
    result.emitted, result.applied, result.missing = len(emitted), len(lat), len(emitted) - len(lat)
    result.p50, result.p95, result.p99 = pct(lat, 50), pct(lat, 95), pct(lat, 99)
    result.max = max(lat) if lat else float("nan")
    result.sustainable = not result.missing
    return result


def med(values: list[float]) -> float:
    values = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return statistics.median(values) if values else float("nan")


# ---------------------------------------------------------------------------------------------
# The bench
# ---------------------------------------------------------------------------------------------


@dataclass
class RunResult:
    path: str
    rate: int
    duration: float
    emitted: int = 0
    applied: int = 0
    missing: int = 0
    duplicates: int = 0
    emit_rate: float = 0.0
    throughput: float = 0.0
    p50: float = float("nan")
    p95: float = float("nan")
    p99: float = float("nan")
    max: float = float("nan")
    created_p50: float = float("nan")
    created_p99: float = float("nan")
    split: dict[str, float] = field(default_factory=dict)
    max_backlog: int = 0
    max_consumer_lag: int = 0
    max_slot_lag_bytes: int | None = None
    max_unpublished: int | None = None
    sustainable: bool = False
    emitter_bound: bool = False
    why: str = ""
    cpu: dict[str, float] = field(default_factory=dict)
    pg: dict[str, float] = field(default_factory=dict)
    relay: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items()}
        return json.loads(json.dumps(out, default=str).replace("NaN", "null"))


class E2EBench:
    def __init__(self, args: argparse.Namespace) -> None:
        from postbox.settings import Settings
        from postbox.stack.addresses import local_stack_env
        from postbox.stack.stack import admin_database_url

        self.args = args
        self.settings = Settings.load(local=local_stack_env())
        self.admin_url = admin_database_url()
        uid = uuid.uuid4().hex[:8]
        self.aggregates = (f"e2ecdc{uid}", f"e2epoll{uid}")
        self.topics = tuple(f"outbox.event.{a}" for a in self.aggregates)
        self.group = f"bench-e2e-{uid}"
        self.tmp = Path(tempfile.mkdtemp(prefix="postbox-e2e-"))
        self.schemas = self.tmp / "schemas"
        for agg in self.aggregates:
            shutil.copytree(ROOT / "schemas" / "order", self.schemas / agg)
        self.ctx = mp.get_context("spawn")
        self.applied = self.ctx.Array("q", 2, lock=False)
        self.committed = self.ctx.Array("q", 2, lock=False)
        self.consumer: Any = None
        self.emitter: Any = None
        self.consumer_pipe: Any = None
        self.emitter_pipe: Any = None
        self.poll_dsn = ""
        self.pids: dict[str, int | None] = {}
        self.consumer_config: dict[str, Any] = {}
        #: Whether a polling path runs (its scratch database is made only then).
        self.polling = "polling" in args.paths.split(",")
        #: Extra polling variants: path label -> poll interval (ms).
        self.poll_intervals = {f"polling{iv}ms": iv for iv in args.extra_poll_intervals}
        #: --replica-waits: a private primary + replica, a second consumer (group ``-wait``) on
        #: the cdc topic waiting for the replica, and its results per rate.
        self.replication = ReplicatedRedis() if args.replica_waits else None
        self.waiter: Any = None
        self.waiter_pipe: Any = None
        self.waiter_applied = self.ctx.Array("q", 2, lock=False)
        self.wait_runs: dict[int, list[RunResult]] = {}
        self.waiter_base = 0

    # -- set-up / tear-down ------------------------------------------------------------------------

    def setup(self) -> None:
        import psycopg
        from confluent_kafka.admin import AdminClient, NewTopic
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        sys.path.insert(0, str(BENCH))
        from polling_publisher import setup_database

        admin = AdminClient({"bootstrap.servers": self.settings.kafka_bootstrap})
        # LogAppendTime: each record's timestamp is the broker's append time, which splits the
        # latency into "commit -> in Kafka" and "in Kafka -> applied" (with CreateTime, Debezium's
        # records carry the source commit time). Nothing else about the topics changes.
        futures = admin.create_topics([NewTopic(t, num_partitions=PARTITIONS, replication_factor=1,
                                                config={"message.timestamp.type": "LogAppendTime"}) for t in self.topics])
        for f in futures.values():
            f.result(timeout=30)
        if self.polling:  # a cdc-only run leaves the scratch database alone
            setup_database(self.admin_url, POLL_DB, app_role=conninfo_to_dict(self.settings.database_url).get("user", "postbox_app"))
            self.poll_dsn = make_conninfo(self.settings.database_url, dbname=POLL_DB)
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            self.versions = {
                "postgresql": conn.execute("SHOW server_version").fetchone()[0],
                "synchronous_commit": conn.execute("SHOW synchronous_commit").fetchone()[0],
                "wal_writer_delay": conn.execute("SHOW wal_writer_delay").fetchone()[0],
            }
        self._find_pids()
        self.consumer_pipe, child = self.ctx.Pipe()
        redis_url = self.replication.start() if self.replication is not None else self.settings.redis_url
        cfg = {"group": self.group, "topics": list(self.topics), "aggregates": list(self.aggregates), "schemas": str(self.schemas),
               "bootstrap": self.settings.kafka_bootstrap, "redis_url": redis_url,
               "batch_size": self.args.batch_size, "batch_wait_ms": self.args.batch_wait_ms,
               "redis_replicas": 0 if self.replication is not None else None,
               "kafka_overrides": dict(kv.split("=", 1) for kv in self.args.consumer_kafka)}
        self.consumer = self.ctx.Process(target=consumer_main, args=(child, cfg, self.applied), daemon=True)
        self.consumer.start()
        if self.replication is not None:  # the same cdc records, applied on the same primary, waiting for its replica
            self.waiter_pipe, wchild = self.ctx.Pipe()
            wcfg = {**cfg, "group": f"{self.group}-wait", "topics": [self.topics[0]], "redis_replicas": 1}
            self.waiter = self.ctx.Process(target=consumer_main, args=(wchild, wcfg, self.waiter_applied), daemon=True)
            self.waiter.start()
        self.emitter_pipe, echild = self.ctx.Pipe()
        self.emitter = self.ctx.Process(target=emitter_main, args=(echild, self.committed), daemon=True)
        self.emitter.start()
        if not self.emitter_pipe.poll(60):
            raise SystemExit("bench: the emitter process did not start")
        self.emitter_pipe.recv()
        if not self.consumer_pipe.poll(120):
            raise SystemExit("bench: the consumer did not get its partitions within 120 s")
        _, assigned, self.consumer_config = self.consumer_pipe.recv()
        if self.waiter_pipe is not None:
            if not self.waiter_pipe.poll(120):
                raise SystemExit("bench: the replica-waiting consumer did not get its partitions within 120 s")
            self.waiter_pipe.recv()
        if assigned < len(self.topics) * PARTITIONS:
            raise SystemExit(f"bench: the consumer got {assigned} of {len(self.topics) * PARTITIONS} partitions")
        self.pids["consumer"] = self.consumer.pid
        self.pids["emitter"] = self.emitter.pid
        log(f"e2e: consumer group {self.group}, batch_size {self.consumer_config['batch_size']}, "
            f"batch_wait_ms {self.consumer_config['batch_wait_ms']}; topics {', '.join(self.topics)}")
        # Warm-up: the first events of each path (connections, Connect's producer, caches).
        for path in PATHS if self.polling else ("cdc",):
            self.run(path, 100, 2.0, warmup=True)

    def _find_pids(self) -> None:
        try:
            from postbox.stack.stack import LocalStack

            stack = LocalStack(locate_tools=False)
            if stack.ports.postgres and str(stack.ports.postgres) in self.settings.database_url:
                self.pids |= {"postgres": stack.postgres.pid(), "kafka": stack.kafka.pid(), "connect": stack.connect.pid(),
                             "redis": stack.redis.pid()}
        except Exception as exc:  # noqa: BLE001 - CPU figures are optional (e.g. docker compose)
            log(f"e2e: no local stack pids ({exc}); CPU per component is reported for the bench's own processes only")

    def teardown(self) -> None:
        import redis
        from confluent_kafka.admin import AdminClient

        for pipe, proc, msg in ((self.consumer_pipe, self.consumer, ("stop",)), (self.waiter_pipe, self.waiter, ("stop",)),
                                (self.emitter_pipe, self.emitter, ("stop",))):
            if proc is None:
                continue
            try:
                pipe.send(msg)
                if pipe.poll(60) and proc is not self.emitter:
                    pipe.recv()
            except (OSError, EOFError):
                pass
            proc.join(30)
            if proc.is_alive():
                proc.terminate()
                proc.join(10)
        try:  # the stack's admin user where Redis has ACL users (the consumer's user may not SCAN)
            from postbox.stack.stack import admin_redis_url  # type: ignore[attr-defined]

            cleanup_url = admin_redis_url()
        except Exception:  # noqa: BLE001
            cleanup_url = self.settings.redis_url
        if self.replication is not None:
            self.replication.stop()  # the private servers' keys go with them
        client = redis.Redis.from_url(cleanup_url)
        removed = 0
        for agg in self.aggregates:
            batch = []
            for key in client.scan_iter(match=f"*{agg}*", count=5000):
                batch.append(key)
                if len(batch) >= 5000:
                    removed += client.unlink(*batch)
                    batch = []
            if batch:
                removed += client.unlink(*batch)
        removed += client.unlink(f"postbox:failures:{self.group}")
        client.close()
        AdminClient({"bootstrap.servers": self.settings.kafka_bootstrap}).delete_topics(list(self.topics))
        if self.polling:
            self._drop_poll_db()
        shutil.rmtree(self.tmp, ignore_errors=True)
        log(f"e2e: removed {removed} Redis keys and the bench topics")

    def _drop_poll_db(self) -> None:
        """The polling path's scratch database (recreated by the next run)."""
        try:
            import psycopg
            from psycopg import sql

            with psycopg.connect(self.admin_url, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(POLL_DB)))
        except Exception as exc:  # noqa: BLE001 - clean-up must not hide the figures
            log(f"e2e: could not drop {POLL_DB}: {exc}")

    # -- probes --------------------------------------------------------------------------------------

    def _cpu(self, relay_pid: int | None) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, pid in self.pids.items():
            if pid:
                out[name] = tree_cpu(pid) if name == "postgres" else (_stat(pid) or (0, 0.0, 0.0))[1]
        if relay_pid:
            out["relay"] = (_stat(relay_pid) or (0, 0.0, 0.0))[1]
        out["bench"] = (_stat(os.getpid()) or (0, 0.0, 0.0))[1]
        stall = cpu_pressure_us()
        if stall is not None:
            out["cpu_stall"] = stall / 1e6  # -> % of the run some task waited for a CPU
        return out

    def _pg_counters(self, path: str) -> dict[str, float]:
        import psycopg
        from psycopg.conninfo import make_conninfo

        dbname = "postbox" if path == "cdc" else POLL_DB  # every polling variant shares the scratch table
        with psycopg.connect(make_conninfo(self.admin_url, dbname=dbname), autocommit=True) as conn:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            ins, upd, hot, dels, dead, vacuums = conn.execute(
                "SELECT coalesce(sum(n_tup_ins),0), coalesce(sum(n_tup_upd),0), coalesce(sum(n_tup_hot_upd),0), "
                "coalesce(sum(n_tup_del),0), coalesce(sum(n_dead_tup),0), coalesce(sum(vacuum_count + autovacuum_count),0) "
                "FROM pg_stat_user_tables WHERE schemaname = 'postbox' AND relname LIKE 'outbox%'"
            ).fetchone()
            commits = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()").fetchone()[0]
            wal = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')").fetchone()[0]
        return {"inserted": float(ins), "updated": float(upd), "hot_updated": float(hot), "deleted": float(dels),
                "dead_tuples": float(dead), "vacuums": float(vacuums),
                "xact_commit": float(commits), "wal_bytes": float(wal)}

    def run(self, path: str, rate: int, duration: float, *, warmup: bool = False) -> RunResult:
        from postbox.kafka_cluster import Kafka
        from postbox.incident.lag import group_lag
        from postbox.slot import slot_status

        index = 0 if path == "cdc" else 1  # "polling" or a variant "polling<N>ms" (another poll interval)
        poll_interval = self.poll_intervals.get(path, self.args.poll_interval_ms)
        agg, topic = self.aggregates[index], self.topics[index]
        dsn = self.settings.database_url if path == "cdc" else self.poll_dsn
        threads = max(2, min(self.args.max_threads, math.ceil(rate / 100)))  # >= 10 ms per transaction per thread
        result = RunResult(path, rate, duration)
        relay = None
        stats_file = self.tmp / f"relay-{time.monotonic_ns()}.json"
        if path != "cdc":
            relay = subprocess.Popen(
                [sys.executable, str(BENCH / "polling_publisher.py"), "--dsn", self.poll_dsn, "--bootstrap", self.settings.kafka_bootstrap,
                 "--poll-interval-ms", str(poll_interval), "--batch-size", str(self.args.relay_batch_size),
                 "--stats-file", str(stats_file)],
                stdout=subprocess.PIPE, text=True,
            )
            assert relay.stdout is not None
            relay.stdout.readline()  # "polling publisher ready"
        pids_before = dict(self.pids)
        pg_before = self._pg_counters(path)
        base_committed, base_applied = self.committed[index], self.applied[index]
        cpu_before = self._cpu(relay.pid if relay else None)
        t0 = time.time() + 0.3
        self.emitter_pipe.send(("run", index, dsn, agg, str(self.schemas), rate, duration, threads, t0))

        samples: list[tuple[float, int]] = []
        lags, slots, unpublished = [0], [], []
        stop = threading.Event()

        def sample() -> None:
            import psycopg

            kafka = Kafka(self.settings.kafka_bootstrap, timeout=5)
            poll_conn = psycopg.connect(self.poll_dsn, autocommit=True) if path != "cdc" else None
            next_slow = 0.0
            try:
                while not stop.is_set():
                    now = time.time()
                    samples.append((now, (self.committed[index] - base_committed) - (self.applied[index] - base_applied)))
                    if now >= next_slow and not warmup:
                        next_slow = now + 1.0
                        try:
                            lags.append(sum(g.total for g in group_lag(kafka, [self.group], topic=topic)))
                        except Exception:  # noqa: BLE001 - a missed sample is not a failed run
                            pass
                        if path == "cdc":
                            lag_bytes = slot_status(self.settings.database_url).get("lag_bytes")
                            if lag_bytes is not None:
                                slots.append(int(lag_bytes))
                        elif poll_conn is not None:
                            unpublished.append(poll_conn.execute("SELECT count(*) FROM postbox.outbox WHERE published_at IS NULL").fetchone()[0])
                    stop.wait(0.2)
            finally:
                kafka.close()
                if poll_conn is not None:
                    poll_conn.close()

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        if not self.emitter_pipe.poll(duration * 4 + 120):
            raise SystemExit("bench: the emitter did not finish")
        emitted = self.emitter_pipe.recv()
        emit_end = time.time()
        expected = base_applied + len(emitted)
        drain_deadline = time.monotonic() + self.args.drain_timeout
        while self.applied[index] < expected and time.monotonic() < drain_deadline:
            time.sleep(0.01)
        t_end = time.time()
        cpu_after = self._cpu(relay.pid if relay else None)
        stop.set()
        sampler.join(10)
        if relay is not None:
            relay.terminate()
            relay.wait(30)
            if stats_file.exists():
                result.relay = json.loads(stats_file.read_text())
        self.consumer_pipe.send(("dump", index))
        done, pending, dups = self.consumer_pipe.recv()
        waited = self._waiter_dump(len(emitted)) if path == "cdc" else None
        if warmup:
            return result
        if waited is not None:
            self.wait_runs.setdefault(rate, []).append(latencies(RunResult("cdc+wait", rate, duration), emitted, waited))
        time.sleep(0.6)  # table statistics are flushed by backends at most once a second
        pg_after = self._pg_counters(path)

        # -- figures -----------------------------------------------------------------------------
        n = len(emitted)
        result.emitted = n
        result.duplicates = dups
        lat, from_created, to_kafka, kafka_to_batch, batch_to_ack = [], [], [], [], []
        acks = []
        tx_ms = [(c - b) * 1000 for _, c, b in emitted]
        result.split["emit_tx_p50"], result.split["emit_tx_p99"] = pct(tx_ms, 50), pct(tx_ms, 99)
        for event_id, committed_at, _began in emitted:
            rec = done.get(event_id)
            if rec is None:
                continue
            _, created, kafka_ts, received, acked = rec
            acks.append(acked)
            lat.append((acked - committed_at) * 1000)
            if created is not None:
                from_created.append((acked - created) * 1000)
            to_kafka.append((kafka_ts - committed_at) * 1000)
            kafka_to_batch.append((received - kafka_ts) * 1000)
            batch_to_ack.append((acked - received) * 1000)
        result.applied = len(lat)
        result.missing = n - len(lat)
        first_commit = min(c for _, c, _ in emitted) if emitted else t0
        last_commit = max(c for _, c, _ in emitted) if emitted else t0
        result.emit_rate = n / max(1e-9, last_commit - t0)
        result.throughput = len(acks) / max(1e-9, (max(acks) if acks else t_end) - first_commit)
        result.p50, result.p95, result.p99, result.max = pct(lat, 50), pct(lat, 95), pct(lat, 99), max(lat) if lat else float("nan")
        result.created_p50, result.created_p99 = pct(from_created, 50), pct(from_created, 99)
        result.split |= {
            "commit_to_kafka_p50": pct(to_kafka, 50), "commit_to_kafka_p99": pct(to_kafka, 99),
            "kafka_to_consume_p50": pct(kafka_to_batch, 50), "kafka_to_consume_p99": pct(kafka_to_batch, 99),
            "consume_to_ack_p50": pct(batch_to_ack, 50), "consume_to_ack_p99": pct(batch_to_ack, 99),
        }
        run_samples = [(t, b) for t, b in samples if t0 <= t <= emit_end]
        result.max_backlog = max((b for _, b in samples), default=0)
        result.max_consumer_lag = max(lags)
        result.max_slot_lag_bytes = max(slots) if slots else None
        result.max_unpublished = max(unpublished) if unpublished else None
        window = max(1e-9, t_end - t0)
        result.cpu = {k: round(100 * (cpu_after.get(k, 0.0) - v) / window, 1) for k, v in cpu_before.items()}
        result.cpu["window_s"] = round(window, 2)
        result.cpu["loadavg_1m"] = round(os.getloadavg()[0], 2)
        delta = {k: pg_after[k] - pg_before[k] for k in pg_before}
        delta["dead_tuples_after"] = pg_after["dead_tuples"]
        result.pg = {
            "rows_inserted": delta["inserted"], "rows_updated": delta["updated"], "hot_updates": delta["hot_updated"],
            # Every UPDATE or DELETE leaves a dead row version for (auto)vacuum; n_dead_tup itself
            # drops whenever autovacuum runs, so the created count is the figure to compare.
            "dead_versions_created": delta["updated"] + delta["deleted"], "vacuums": delta["vacuums"],
            "dead_tuples_after": delta["dead_tuples_after"],
            "commits_in_db": delta["xact_commit"],
            "wal_bytes_cluster": delta["wal_bytes"], "wal_bytes_per_event": round(delta["wal_bytes"] / max(1, n), 1),
            "commits_per_event": round(delta["xact_commit"] / max(1, n), 3),
        }

        # -- sustainable? --------------------------------------------------------------------------
        why = []
        short = result.emit_rate < 0.97 * rate
        if short:
            why.append(f"emitter reached {result.emit_rate:.0f}/s of {rate}/s")
        if result.missing:
            why.append(f"{result.missing} events not applied within {self.args.drain_timeout:.0f} s of the end")
        if run_samples:
            span = run_samples[-1][0] - run_samples[0][0]
            q2 = [b for t, b in run_samples if run_samples[0][0] + span * 0.25 <= t < run_samples[0][0] + span * 0.5]
            q4 = [b for t, b in run_samples if t >= run_samples[0][0] + span * 0.75]
            if q2 and q4 and statistics.fmean(q4) > statistics.fmean(q2) + 0.25 * rate:
                why.append(f"backlog grew from {statistics.fmean(q2):.0f} to {statistics.fmean(q4):.0f} events")
        # Only the load generator fell short (the pipeline kept up with what it was given).
        result.emitter_bound = short and len(why) == 1
        self._find_pids()
        restarted = [k for k in ("postgres", "kafka", "connect", "redis") if pids_before.get(k) != self.pids.get(k)]
        if restarted:
            why.append(f"disturbed: {', '.join(restarted)} restarted during the run (shared machine)")
            result.cpu = {}
        result.sustainable = not why
        result.why = "; ".join(why)
        return result

    def _waiter_dump(self, emitted: int) -> dict[str, Any] | None:
        """The replica-waiting consumer's records of this run (None without --replica-waits),
        once it applied them all or the drain timeout passed."""
        if self.waiter_pipe is None:
            return None
        expected = self.waiter_base + emitted
        deadline = time.monotonic() + self.args.drain_timeout
        while self.waiter_applied[0] < expected and time.monotonic() < deadline:
            time.sleep(0.01)
        self.waiter_base = self.waiter_applied[0]
        self.waiter_pipe.send(("dump", 0))
        done, _pending, _dups = self.waiter_pipe.recv()
        return done

    def final_counts(self, timeout: float) -> list[Any]:
        """Wait (at most ``timeout`` s) until every event either path committed, warm-ups included,
        was observed applied, then one tally per path: events committed vs applied (late events
        of an unsustainable probe count here once they land)."""
        from counting import Tally

        deadline = time.monotonic() + timeout
        while any(self.applied[i] < self.committed[i] for i in range(2)) and time.monotonic() < deadline:
            time.sleep(0.1)
        names = ("cdc path", "polling paths")
        return [Tally(f"e2e {names[i]}: events committed vs observed applied", self.committed[i], self.applied[i]) for i in range(2)]

    # -- the max-rate search ----------------------------------------------------------------------------

    def search(self, path: str, known: dict[int, RunResult]) -> tuple[int, bool, list[RunResult]]:
        """Highest sustainable rate: steps of 1.5x from the best known rate, then bisect."""
        probes: list[RunResult] = []
        ok = [r for r, res in known.items() if res.sustainable]
        lo = max(ok) if ok else 0
        bad = [r for r, res in known.items() if not res.sustainable and r > lo]
        hi = min(bad) if bad else None
        emitter_bound = False
        budget = self.args.search_probes
        while budget > 0:
            if hi is None:
                rate = int(round(max(lo * 1.5, 500) / 50) * 50)
                if rate > self.args.max_rate:
                    break
            else:
                if hi / max(lo, 1) <= 1 + self.args.search_precision:
                    break
                rate = int(round((lo + hi) / 2 / 50) * 50) if lo else hi // 2
                if rate in (lo, hi):
                    break
            res = self.run(path, rate, self.args.probe_duration)
            probes.append(res)
            budget -= 1
            log(f"e2e: {path} probe {rate}/s: {'sustainable' if res.sustainable else 'NOT sustainable (' + res.why + ')'}; "
                f"p99 {res.p99:.0f} ms, throughput {res.throughput:.0f}/s")
            if res.sustainable:
                lo = rate
            else:
                hi = rate
                if res.emitter_bound:
                    emitter_bound = True  # the load generator, not the pipeline, ran out
                    break
        return lo, emitter_bound, probes


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------


def fmt(v: Any, digits: int = 0) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def median_result(runs: list[RunResult]) -> dict[str, Any]:
    keys = ("p50", "p95", "p99", "max", "created_p50", "created_p99", "throughput", "emit_rate", "max_backlog", "max_consumer_lag")
    out: dict[str, Any] = {k: med([getattr(r, k) for r in runs]) for k in keys}
    out["max_slot_lag_bytes"] = med([r.max_slot_lag_bytes for r in runs if r.max_slot_lag_bytes is not None]) if any(
        r.max_slot_lag_bytes is not None for r in runs) else None
    out["max_unpublished"] = med([r.max_unpublished for r in runs if r.max_unpublished is not None]) if any(
        r.max_unpublished is not None for r in runs) else None
    out["split"] = {k: med([r.split.get(k) for r in runs]) for k in runs[0].split}
    out["cpu"] = {k: med([r.cpu.get(k) for r in runs]) for k in runs[0].cpu}
    out["pg"] = {k: med([r.pg.get(k) for r in runs]) for k in runs[0].pg}
    out["missing"] = sum(r.missing for r in runs)
    out["duplicates"] = sum(r.duplicates for r in runs)
    out["sustainable"] = all(r.sustainable for r in runs)
    out["runs"] = len(runs)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short runs, one repetition (under ~3 minutes)")
    parser.add_argument("--rates", default="100,1000", help="fixed rates, events/s (default 100,1000)")
    parser.add_argument("--duration", type=float, default=None, help="seconds per fixed-rate run (default 30; quick 10)")
    parser.add_argument("--reps", type=int, default=None, help="repetitions of each fixed-rate pair (default 3; quick 1)")
    parser.add_argument("--no-search", action="store_true", help="skip the highest-sustainable-rate search")
    parser.add_argument("--probe-duration", type=float, default=None, help="seconds per search probe (default 20; quick 8)")
    parser.add_argument("--search-probes", type=int, default=None, help="probes per path (default 6; quick 3)")
    parser.add_argument("--search-precision", type=float, default=0.15, help="stop bisecting when hi/lo <= 1 + this")
    parser.add_argument("--max-rate", type=int, default=16000, help="never probe above this rate")
    parser.add_argument("--max-threads", type=int, default=32, help="emitter threads (connections) at most")
    parser.add_argument("--drain-timeout", type=float, default=None, help="seconds to wait for the last events (default 30; quick 15)")
    parser.add_argument("--poll-interval-ms", type=int, default=100, help="polling publisher: sleep after a non-full batch")
    parser.add_argument("--relay-batch-size", type=int, default=500, help="polling publisher: rows per cycle")
    parser.add_argument("--batch-size", type=int, default=None, help="consumer batch size (default: the consumer's default)")
    parser.add_argument("--batch-wait-ms", type=int, default=None, help="consumer batch wait (default: the consumer's default)")
    parser.add_argument("--consumer-kafka", action="append", default=[], metavar="KEY=VALUE", help="librdkafka consumer property (repeatable)")
    parser.add_argument("--paths", default="cdc,polling", help="which paths to run (default both)")
    parser.add_argument("--replica-waits", action="store_true",
                        help="apply on a private Redis primary + replica, by two consumers of the cdc records: without replica "
                             "waits (path cdc, --redis-replicas 0) and with (path cdc+wait, --redis-replicas 1); p50/p99 side by side")
    parser.add_argument("--extra-poll-intervals", default=None,
                        help="also run the polling path with these poll intervals, ms (default 10; quick none); paths polling<N>ms")
    args = parser.parse_args()
    quick = args.quick
    args.duration = args.duration or (10.0 if quick else 30.0)
    args.reps = args.reps or (1 if quick else 3)
    args.probe_duration = args.probe_duration or (8.0 if quick else 20.0)
    args.search_probes = args.search_probes if args.search_probes is not None else (3 if quick else 6)
    args.drain_timeout = args.drain_timeout or (15.0 if quick else 30.0)
    rates = [int(r) for r in args.rates.split(",") if r.strip()]
    if args.extra_poll_intervals is None:
        args.extra_poll_intervals = "" if quick else "10"
    args.extra_poll_intervals = [int(x) for x in args.extra_poll_intervals.split(",") if x.strip() and int(x) != args.poll_interval_ms]
    paths = [p for p in PATHS if p in args.paths.split(",")]
    fixed_paths = paths + ([f"polling{iv}ms" for iv in args.extra_poll_intervals] if "polling" in paths else [])

    started = time.monotonic()
    bench = E2EBench(args)
    runs: dict[tuple[str, int], list[RunResult]] = {}
    search: dict[str, tuple[int, bool, list[RunResult]]] = {}
    tallies: list[Any] = []
    try:
        bench.setup()
        for rep in range(args.reps):
            for rate in rates:
                order = fixed_paths if rep % 2 == 0 else list(reversed(fixed_paths))
                for path in order:
                    res = bench.run(path, rate, args.duration)
                    runs.setdefault((path, rate), []).append(res)
                    log(f"e2e: {path} {rate}/s rep {rep + 1}: p50 {res.p50:.1f} p99 {res.p99:.1f} max {res.max:.1f} ms; "
                        f"throughput {res.throughput:.0f}/s; {'ok' if res.sustainable else 'NOT sustainable: ' + res.why}")
        if not args.no_search:
            for path in paths:
                known = {rate: rs[-1] for (p, rate), rs in runs.items() if p == path}
                search[path] = bench.search(path, known)
        tallies = bench.final_counts(max(60.0, args.drain_timeout))
    finally:
        bench.teardown()

    # -- tables ------------------------------------------------------------------------------------
    summary = {key: median_result(rs) for key, rs in runs.items()}
    cfg = bench.consumer_config
    print(f"\nend to end, commit returned -> apply acknowledged by Redis (ms); medians of {args.reps} run(s) of "
          f"{args.duration:.0f} s; consumer batch_size {cfg.get('batch_size')}, batch_wait_ms {cfg.get('batch_wait_ms')}; "
          f"polling interval {args.poll_interval_ms} ms, relay batch {args.relay_batch_size}")
    head = f"{'path':<14}{'rate/s':>8}{'p50':>8}{'p95':>8}{'p99':>8}{'max':>8}{'p99*':>8}{'thru/s':>9}{'backlog':>9}{'kafka lag':>10}{'slot KiB':>9}{'unpub':>7}{'ok':>4}"
    print(head)
    for rate in rates:
        for path in fixed_paths:
            s = summary.get((path, rate))
            if not s:
                continue
            slot = s["max_slot_lag_bytes"] / 1024 if s["max_slot_lag_bytes"] is not None else None
            print(f"{path:<14}{rate:>8,}{fmt(s['p50'], 1):>8}{fmt(s['p95'], 1):>8}{fmt(s['p99'], 1):>8}{fmt(s['max'], 1):>8}"
                  f"{fmt(s['created_p99'], 1):>8}{fmt(s['throughput']):>9}{fmt(s['max_backlog']):>9}{fmt(s['max_consumer_lag']):>10}"
                  f"{fmt(slot):>9}{fmt(s['max_unpublished']):>7}{'yes' if s['sustainable'] else 'NO':>4}")
        for variant in [p for p in fixed_paths if p != "cdc"]:
            if ("cdc", rate) in summary and (variant, rate) in summary:
                c, p = summary[("cdc", rate)], summary[(variant, rate)]
                print(f"{'ratio':<14}{rate:>8,}{p['p50'] / c['p50']:>7.1f}x{p['p95'] / c['p95']:>7.1f}x{p['p99'] / c['p99']:>7.1f}x"
                      f"{'':>8}{'':>8}   {variant} / cdc")
    print("p99* = p99 from the row's created_at (clock_timestamp() at INSERT, before the commit)")
    if bench.wait_runs:
        print("\nreplica waits: the same cdc records applied on a private primary + replica by two consumers (ms, medians)")
        print(f"{'rate/s':>8}{'p50 no wait':>13}{'p50 WAIT 1':>12}{'ratio':>7}{'p99 no wait':>13}{'p99 WAIT 1':>12}{'ratio':>7}{'missing':>9}")
        for rate in rates:
            c, w = summary.get(("cdc", rate)), bench.wait_runs.get(rate)
            if c and w:
                p50, p99 = med([r.p50 for r in w]), med([r.p99 for r in w])
                print(f"{rate:>8,}{fmt(c['p50'], 1):>13}{fmt(p50, 1):>12}{p50 / c['p50']:>6.2f}x"
                      f"{fmt(c['p99'], 1):>13}{fmt(p99, 1):>12}{p99 / c['p99']:>6.2f}x{sum(r.missing for r in w):>9}")

    print("\nwhere the time goes (ms, p50 / p99): commit -> appended to Kafka (LogAppendTime) -> out of consume() -> acked;"
          " and the emitting transaction itself (BEGIN .. COMMIT returned)")
    for rate in rates:
        for path in fixed_paths:
            s = summary.get((path, rate))
            if s:
                sp = s["split"]
                print(f"{path:<14}{rate:>8,}  {fmt(sp['commit_to_kafka_p50'], 1):>7} / {fmt(sp['commit_to_kafka_p99'], 1):<7}"
                      f"{fmt(sp['kafka_to_consume_p50'], 1):>7} / {fmt(sp['kafka_to_consume_p99'], 1):<7}"
                      f"{fmt(sp['consume_to_ack_p50'], 1):>7} / {fmt(sp['consume_to_ack_p99'], 1):<7}"
                      f"   tx {fmt(sp['emit_tx_p50'], 1)} / {fmt(sp['emit_tx_p99'], 1)}")

    comps = ["postgres", "kafka", "connect", "redis", "consumer", "emitter", "relay", "bench", "cpu_stall"]
    print("\nCPU, % of one core over the run (2 cores = 200 %); postgres = postmaster + all its children;"
          " cpu_stall = % of the run during which some runnable task waited for a CPU (Linux PSI, whole machine)")
    print(f"{'path':<14}{'rate/s':>8}" + "".join(f"{c:>10}" for c in comps))
    for rate in rates:
        for path in fixed_paths:
            s = summary.get((path, rate))
            if s:
                print(f"{path:<14}{rate:>8,}" + "".join(f"{fmt(s['cpu'].get(c), 1):>10}" for c in comps))

    print("\nPostgreSQL write load per run (each path's outbox tables; WAL is cluster-wide)")
    print(f"{'path':<14}{'rate/s':>8}{'inserted':>10}{'updated':>9}{'HOT':>7}{'dead made':>10}{'vacuums':>8}{'commits/ev':>11}{'WAL B/ev':>10}")
    for rate in rates:
        for path in fixed_paths:
            s = summary.get((path, rate))
            if s:
                g = s["pg"]
                print(f"{path:<14}{rate:>8,}{fmt(g['rows_inserted']):>10}{fmt(g['rows_updated']):>9}{fmt(g['hot_updates']):>7}"
                      f"{fmt(g['dead_versions_created']):>10}{fmt(g['vacuums']):>8}{fmt(g['commits_per_event'], 2):>11}{fmt(g['wal_bytes_per_event']):>10}")

    if search:
        print("\nhighest sustainable rate (backlog bounded, emitter on rate, everything applied)")
        for path, (best, bound, probes) in search.items():
            tried = ", ".join(f"{p.rate}{'✓' if p.sustainable else '✗'}" for p in probes)
            note = " (emitter-bound: a lower bound)" if bound else ""
            print(f"{path:<14}{best:>8,}/s{note}   probes: {tried or 'none'}")

    figures: dict[str, Any] = {"quick": quick, "reps": args.reps, "duration_s": args.duration,
                               "consumer_batch_size": cfg.get("batch_size"), "consumer_batch_wait_ms": cfg.get("batch_wait_ms"),
                               "poll_interval_ms": args.poll_interval_ms, "postgresql": bench.versions}
    for (path, rate), s in summary.items():
        pre = f"{path}_"
        suf = f"_at_{rate}"
        for k in ("p50", "p95", "p99", "max"):
            figures[f"{pre}{k}_ms{suf}"] = round(s[k], 1) if not math.isnan(s[k]) else None
        figures[f"{pre}p99_from_created_ms{suf}"] = round(s["created_p99"], 1) if not math.isnan(s["created_p99"]) else None
        figures[f"{pre}throughput{suf}"] = round(s["throughput"])
        figures[f"{pre}max_consumer_lag{suf}"] = s["max_consumer_lag"]
        figures[f"{pre}max_backlog{suf}"] = s["max_backlog"]
        if s["max_slot_lag_bytes"] is not None:
            figures[f"{pre}max_slot_lag_bytes{suf}"] = s["max_slot_lag_bytes"]
        if s["max_unpublished"] is not None:
            figures[f"{pre}max_unpublished{suf}"] = s["max_unpublished"]
        figures[f"{pre}sustainable{suf}"] = s["sustainable"]
        figures[f"{pre}cpu{suf}"] = s["cpu"]
        figures[f"{pre}pg{suf}"] = s["pg"]
        figures[f"{pre}split{suf}"] = {k: round(v, 1) for k, v in s["split"].items() if not math.isnan(v)}
        figures[f"{pre}missing{suf}"] = s["missing"]
    for rate in rates:
        for variant in [p for p in fixed_paths if p != "cdc"]:
            c, p = summary.get(("cdc", rate)), summary.get((variant, rate))
            if c and p:
                figures[f"{variant}_vs_cdc_p99_at_{rate}"] = round(p["p99"] / c["p99"], 2)
    figures["extra_poll_intervals_ms"] = args.extra_poll_intervals
    figures["replica_waits"] = bool(bench.wait_runs)
    for rate, w in bench.wait_runs.items():
        c = summary.get(("cdc", rate))
        for k in ("p50", "p99"):
            figures[f"cdc_wait_{k}_ms_at_{rate}"] = round(med([getattr(r, k) for r in w]), 1)
            if c:
                figures[f"cdc_wait_vs_cdc_{k}_at_{rate}"] = round(med([getattr(r, k) for r in w]) / c[k], 2)
        figures[f"cdc_wait_missing_at_{rate}"] = sum(r.missing for r in w)
    for path, (best, bound, probes) in search.items():
        figures[f"{path}_max_rate"] = best
        figures[f"{path}_max_rate_emitter_bound"] = bound
        figures[f"{path}_probes"] = [{"rate": p.rate, "sustainable": p.sustainable, "p99_ms": round(p.p99, 1) if not math.isnan(p.p99) else None,
                                      "throughput": round(p.throughput), "why": p.why} for p in probes]
    figures["events_committed_vs_applied"] = {t.what.split(":")[0]: [t.sent, t.counted] for t in tallies}
    figures["elapsed_s"] = round(time.monotonic() - started, 1)
    print(json.dumps(figures, default=str).replace("NaN", "null"))
    require_full_counts(tallies)  # after the figures: a short count still shows them, and fails the run


if __name__ == "__main__":
    main()
