"""The fault suite's machinery: a steady writer load, consumer processes, kills, and the verdict.

A run (:class:`FaultRun`) owns one aggregate type (so one topic), one consumer group and the
``tests.apps.counting:audited`` handler, whose Redis state shows every double or missing
application: per aggregate the list of applied sequence numbers (order and exactly-once at a
glance) and a per-event apply counter.

- :class:`Emitter` (a thread) emits events through the writer at a bounded rate, one transaction
  per few events, and knows exactly which events committed: when a commit fails it asks
  PostgreSQL (``pg_xact_status`` of the transaction's id, from a new connection) whether the
  transaction committed; if it did not, the same events (same per-aggregate sequence numbers) are
  emitted again in a new transaction. So the set of committed events is exact, and per aggregate
  their sequence numbers are 0, 1, 2, ... in commit order.
- :class:`ConsumerGroup` runs ``postbox consume`` processes with DEBUG logs, whose
  ``batch finished`` lines survive a SIGKILL and say how many records each process saw, applied
  and absorbed as duplicates.
- ``kill_*`` methods kill one component, restart it, and measure the **recovery time**: from the
  kill until the first event committed after the kill is applied in Redis.
- :meth:`FaultRun.verdict` drains, reads Redis and the whole topic, and returns a :class:`Verdict`
  listing every violation (lost, applied twice, out of order, applied but never committed, missing
  from the topic) plus the figures.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import psycopg
import redis
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from postbox.codec import AvroCodec
from postbox.errors import ConnectError, StackError
from postbox.outbox import NewEvent, Outbox
from postbox.outbox.policy import Retention
from postbox.schemas import SchemaRepository
from postbox.settings import Settings
from postbox.stack.stack import LocalStack, admin_database_url
from tests.faults.stall import Drain, stall_report
from tests.support.consumers import ConsumerProcess, create_topic

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2024, 5, 6, 7, 8, 9, tzinfo=timezone.utc)


def _payload(aggregate_id: str, seq: int, customer_id: str = "c") -> dict[str, Any]:
    return {"order_id": aggregate_id, "customer_id": customer_id, "total_cents": seq, "placed_at": NOW,
            "items": [{"sku": "s", "quantity": 1, "unit_price_cents": seq}]}


@dataclass
class Committed:
    id: str
    aggregate_id: str
    seq: int
    at: float  # monotonic time of the commit


# -- the writer load ---------------------------------------------------------------------------------


class Emitter(threading.Thread):
    """Emits ``per_tx`` events per transaction, ``rate`` events/s at most, until stopped."""

    def __init__(self, database_url: str, outbox: Outbox, aggregate_type: str, aggregates: int, *,
                 rate: float, per_tx: int, limit: int | None = None, log: Callable[[str], None] = print,
                 check_url: str | None = None) -> None:
        super().__init__(daemon=True, name=f"emitter-{aggregate_type}")
        self.database_url = database_url
        #: Where a failed commit's outcome is looked up (a role that may read postbox.outbox).
        self.check_url = check_url or database_url
        self.outbox = outbox
        self.aggregate_type = aggregate_type
        self.ids = [f"a{i}" for i in range(aggregates)]
        self.rate = rate
        self.per_tx = per_tx
        self.limit = limit
        self.log = log
        self.committed: list[Committed] = []
        self.next_seq: dict[str, int] = {a: 0 for a in self.ids}
        self.lock = threading.Lock()
        self.stop_flag = threading.Event()
        self.paused = threading.Event()
        self.error: BaseException | None = None
        self._big: list[tuple[int, threading.Event]] = []
        #: Special transactions asked for: (aggregate, events, customer_id of the first by its seq, done).
        self._special: list[tuple[str, int, Callable[[int], str], threading.Event]] = []
        #: Event ids by the customer_id prefix that marked them ("poison", "flaky"; tests.apps.counting).
        self.marked: dict[str, list[str]] = defaultdict(list)
        self._cursor = 0
        self._conn: psycopg.Connection | None = None
        # figures
        self.transactions = 0
        self.commit_failures = 0       # a statement or the COMMIT raised
        self.resolved_committed = 0    # ... and pg_xact_status said it had committed anyway
        self.retried_transactions = 0  # ... and it had not: the same events were emitted again
        self.big_batches: list[int] = []
        self.big_ids: list[list[str]] = []  # the event ids of each big transaction, in order

    # public ------------------------------------------------------------------------------------------
    def count(self) -> int:
        with self.lock:
            return len(self.committed)

    def first_after(self, t: float) -> Committed | None:
        """The first event committed after monotonic time ``t`` (None yet)."""
        with self.lock:
            found = None
            for c in reversed(self.committed):
                if c.at <= t:
                    break
                found = c
            return found

    def big_batch(self, n: int) -> threading.Event:
        """Ask for one transaction of ``n`` events (emit_many); the event is set once committed."""
        done = threading.Event()
        with self.lock:
            self._big.append((n, done))
        return done

    def special(self, aggregate: str, events: int, customer_id: Callable[[int], str]) -> threading.Event:
        """Ask for one transaction of ``events`` events of ``aggregate`` whose first carries
        ``customer_id(its seq)`` (its prefix up to ':' marks the event, see :attr:`marked`); the
        event is set once committed. Runs even while paused."""
        done = threading.Event()
        with self.lock:
            self._special.append((aggregate, events, customer_id, done))
        return done

    def stop(self, timeout: float = 60) -> None:
        self.stop_flag.set()
        self.join(timeout)
        if self.is_alive():
            raise AssertionError("emitter thread did not stop")
        if self._conn is not None:
            self._conn.close()
        if self.error is not None:
            raise AssertionError(f"emitter failed: {self.error!r}") from self.error

    # the loop ------------------------------------------------------------------------------------------
    def run(self) -> None:
        try:
            interval = self.per_tx / self.rate
            next_at = time.monotonic()
            while not self.stop_flag.is_set():
                with self.lock:  # a special or big transaction runs even while paused (paused: nothing else)
                    special = self._special.pop(0) if self._special else None
                    big = None if special or not self._big else self._big.pop(0)
                if special is not None:
                    agg, n, customer_of, done = special
                    first = self.count()
                    plan = [(agg, self._next(agg)) for _ in range(n)]
                    customer = customer_of(plan[0][1])
                    self._transaction(plan, first_customer=customer)
                    with self.lock:
                        self.marked[customer.split(":", 1)[0]].append(self.committed[first].id)
                    done.set()
                    continue
                if big is not None:
                    n, done = big
                    first = self.count()
                    self._transaction(self._plan(n))
                    with self.lock:
                        self.big_ids.append([c.id for c in self.committed[first:]])
                    self.big_batches.append(n)
                    done.set()
                    continue
                if self.limit is not None and self.count() >= self.limit:
                    self.stop_flag.wait(0.05)
                    continue
                if self.paused.is_set():
                    self.stop_flag.wait(0.05)
                    next_at = time.monotonic()
                    continue
                n = self.per_tx if self.limit is None else min(self.per_tx, self.limit - self.count())
                self._transaction(self._plan(n))
                next_at += interval
                delay = next_at - time.monotonic()
                if delay > 0:
                    self.stop_flag.wait(delay)
                else:
                    next_at = time.monotonic()  # behind (an outage): do not burst to catch up
        except BaseException as exc:  # surfaced by stop()
            self.error = exc

    def _plan(self, n: int) -> list[tuple[str, int]]:
        plan = []
        for _ in range(n):
            agg = self.ids[self._cursor % len(self.ids)]
            self._cursor += 1
            plan.append((agg, self._next(agg)))
        return plan

    def _next(self, agg: str) -> int:
        seq = self.next_seq[agg]
        self.next_seq[agg] += 1
        return seq

    def _connection(self) -> psycopg.Connection:
        deadline = time.monotonic() + 180
        delay = 0.05
        while self._conn is None or self._conn.closed:
            try:
                self._conn = psycopg.connect(self.database_url, connect_timeout=3)
            except psycopg.OperationalError:
                if time.monotonic() > deadline or self.stop_flag.is_set() and time.monotonic() > deadline - 150:
                    raise
                time.sleep(delay)
                delay = min(1.0, delay * 2)
        return self._conn

    def _transaction(self, plan: list[tuple[str, int]], first_customer: str = "c") -> None:
        """Commit ``plan`` exactly once, whatever happens to PostgreSQL meanwhile."""
        events = [NewEvent(self.aggregate_type, agg, "OrderPlaced", _payload(agg, seq, first_customer if i == 0 else "c"))
                  for i, (agg, seq) in enumerate(plan)]
        for _attempt in range(1000):
            conn = self._connection()
            xid = None
            emitted = []
            try:
                xid = conn.execute("SELECT pg_current_xact_id()::text").fetchone()[0]
                emitted = self.outbox.emit_many(conn, events)
                conn.commit()
                outcome = "committed"
            except psycopg.Error:
                self.commit_failures += 1
                try:
                    conn.close()
                except psycopg.Error:
                    pass
                outcome = self._resolve(xid, [str(e.id) for e in emitted]) if xid is not None and emitted else "aborted"
                if outcome == "committed":
                    self.resolved_committed += 1
                else:
                    self.retried_transactions += 1
                    continue
            now = time.monotonic()
            self.transactions += 1
            with self.lock:
                self.committed.extend(Committed(str(e.id), agg, seq, now) for e, (agg, seq) in zip(emitted, plan))
            return
        raise AssertionError("a transaction failed 1000 times in a row")

    def _resolve(self, xid: str, ids: list[str]) -> str:
        """Did the transaction that emitted ``ids`` (transaction id ``xid``) commit? Asked on a new
        connection once PostgreSQL answers again, and once ``xid`` is no longer in progress.

        By its rows when the outbox keeps them (the partitions retention, the default), not by
        ``pg_xact_status(xid)`` alone: after an immediate stop, a transaction whose WAL was not
        flushed yet leaves no trace, and crash recovery hands its transaction id to the next
        transaction that writes — the stack's own ``ensure_stack`` (its schema init commits right
        after the restart) often is that one — so ``pg_xact_status`` answers "committed" for
        events that never were. They were counted as committed, never reached the topic, and the
        verdict's drain waited for them until it timed out. Reproduced on a scratch cluster: xid
        725 in flight at the immediate stop, the first writer after the restart got 725 and
        committed, ``pg_xact_status(725)`` = committed, the in-flight transaction's row absent.
        With the delete retention the rows are gone either way: the status is all there is."""
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                with psycopg.connect(self.check_url, connect_timeout=3, autocommit=True) as conn:
                    status = conn.execute("SELECT pg_xact_status(%s::xid8)", (xid,)).fetchone()[0]
                    if status != "in progress" and self.outbox.retention is Retention.PARTITIONS:
                        return _outcome_by_rows(conn, ids)
            except psycopg.errors.InvalidParameterValue as exc:
                # "transaction ID ... is in the future": after an immediate stop, crash recovery set
                # the next xid from the WAL it found, and nothing of this transaction was flushed;
                # a commit record would have been (COMMIT waits for its flush), so it did not commit.
                if "in the future" not in str(exc):
                    raise
                return "aborted"
            except psycopg.OperationalError:
                time.sleep(0.2)
                continue
            if status in ("committed", "aborted"):
                return status
            if status is None:  # too old to know: never the case for a transaction of seconds ago
                raise AssertionError(f"pg_xact_status({xid}) unknown")
            time.sleep(0.1)  # in progress: the backend has not noticed the broken connection yet
        raise AssertionError(f"transaction {xid}: outcome still unknown after 180 s")


def _outcome_by_rows(conn: psycopg.Connection, ids: list[str]) -> str:
    """"committed" when every row of one transaction is in the outbox, "aborted" when none is."""
    found = conn.execute("SELECT count(*) FROM postbox.outbox WHERE id = ANY(%s::uuid[])", (ids,)).fetchone()[0]
    if found not in (0, len(ids)):
        raise AssertionError(f"{found} of the {len(ids)} rows of one transaction in the outbox: {ids}")
    return "committed" if found else "aborted"


# -- consumers -----------------------------------------------------------------------------------------


class ConsumerGroup:
    """``postbox consume <app>`` processes of one group; logs kept per process.

    ``app_spec`` may change between starts (a redeploy of a changed handler)."""

    def __init__(self, env: dict[str, str], log_dir: Path, members: int = 1, app_spec: str = "tests.apps.counting:audited") -> None:
        self.env = env
        self.log_dir = log_dir
        self.members = members
        self.app_spec = app_spec
        self.processes: list[ConsumerProcess] = []
        self.retired: list[ConsumerProcess] = []
        self._n = 0

    def start(self) -> None:
        while len(self.processes) < self.members:
            self._n += 1
            self.processes.append(ConsumerProcess(self.app_spec, self.env, self.log_dir / f"consumer-{self._n}.log"))

    def kill_pid(self, pid: int) -> ConsumerProcess:
        """SIGKILL the member with process id ``pid``."""
        [victim] = [p for p in self.processes if p.process.pid == pid]
        self.processes.remove(victim)
        victim.kill()
        self.retired.append(victim)
        return victim

    def check_alive(self) -> None:
        for p in self.processes:
            if not p.alive():
                raise AssertionError(f"consumer exited with {p.process.returncode}: {p.output()[-1500:]}")

    def stop(self) -> list[str]:
        """SIGTERM every member; what went wrong (a hang, an exit code other than 0), else []."""
        problems = []
        for p in self.processes:
            try:
                code = p.terminate(timeout=30)
            except AssertionError as exc:  # it hung: terminate() SIGKILLed it
                problems.append(str(exc))
            else:
                if code != 0:
                    problems.append(f"consumer exited {code} after SIGTERM (expected 0); log: {p.log_path}")
            self.retired.append(p)
        self.processes = []
        return problems

    def close(self) -> None:
        for p in self.processes + self.retired:
            p.close()

    def batch_lines(self, path: Path) -> list[dict[str, Any]]:
        """The parsed ``batch finished`` lines of one process's log (a line cut by SIGKILL skipped)."""
        out = []
        for line in path.read_text(errors="replace").splitlines():
            if '"batch finished"' not in line:
                continue
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def first_line_at(self, path: Path, message: str) -> float | None:
        """Wall-clock time (epoch seconds) of the first ``message`` line of one process's log."""
        for line in path.read_text(errors="replace").splitlines():
            if f'"{message}"' in line:
                try:
                    return datetime.fromisoformat(json.loads(line)["ts"]).timestamp()
                except (ValueError, KeyError):
                    continue
        return None

    def batch_totals(self) -> dict[str, int]:
        """Sums of the ``batch finished`` log lines of every process of the run, and its rebalances."""
        totals: Counter = Counter()
        for path in sorted(self.log_dir.glob("consumer-*.log")):
            for data in self.batch_lines(path):
                for key in ("records", "applied", "duplicates", "failed", "retried"):
                    totals[key] += int(data.get(key, 0))
                totals["batches"] += 1
            text = path.read_text(errors="replace")
            totals["transient_pauses"] += text.count('"transient failure: partition paused')
            totals["kafka_errors"] += text.count('"Kafka client error')
            totals["rebalances"] += sum(text.count(f'"partitions {kind}"') for kind in ("assigned", "revoked", "lost"))
        return dict(totals)


# -- the verdict ------------------------------------------------------------------------------------------


@dataclass
class Kill:
    component: str
    note: str
    recovery_s: float | None
    restart_s: float
    #: Monotonic time of the kill (the stall report's timeline).
    at: float = 0.0


@dataclass
class Verdict:
    scenario: str
    committed: int
    applied: int
    topic_records: int
    topic_duplicates: int
    consumer: dict[str, int]
    emitter: dict[str, int]
    kills: list[Kill]
    seconds: float
    violations: list[str] = field(default_factory=list)
    #: What shows the scenario really happened (each kill's point, redeliveries, rebalances, ...).
    evidence: list[str] = field(default_factory=list)
    #: Events marked to fail (poison, flaky) that were dead-lettered instead of applied.
    dead_lettered: int = 0

    @property
    def duplicates_absorbed(self) -> int:
        return self.consumer.get("duplicates", 0)

    def figures(self) -> dict[str, Any]:
        recoveries = [k.recovery_s for k in self.kills if k.recovery_s is not None]
        by_component: dict[str, list[float]] = defaultdict(list)
        for k in self.kills:
            if k.recovery_s is not None:
                by_component[k.component].append(round(k.recovery_s, 2))
        return {
            "scenario": self.scenario, "seconds": round(self.seconds, 1),
            "events_committed": self.committed, "events_applied": self.applied,
            "lost": sum(1 for v in self.violations if v.startswith("lost")),
            "violations": len(self.violations),
            "topic_records": self.topic_records, "topic_duplicates": self.topic_duplicates,
            "records_consumed": self.consumer.get("records", 0),
            "duplicates_absorbed": self.duplicates_absorbed,
            "duplicates_from_redelivery": max(0, self.duplicates_absorbed - self.topic_duplicates),
            "duplicates_from_topic": self.topic_duplicates,
            "transient_pauses": self.consumer.get("transient_pauses", 0),
            "rebalances": self.consumer.get("rebalances", 0),
            "commit_failures": self.emitter.get("commit_failures", 0),
            "commits_resolved_committed": self.emitter.get("resolved_committed", 0),
            "transactions_retried": self.emitter.get("retried_transactions", 0),
            "big_batches": self.emitter.get("big_batches", 0),
            "kills": len(self.kills),
            "recovery_s": by_component,
            "recovery_max_s": round(max(recoveries), 2) if recoveries else None,
        }

    def report(self) -> str:
        f = self.figures()
        lines = [
            f"== fault scenario {self.scenario}: {'PASS' if not self.violations else 'FAIL'} ({f['seconds']} s)",
            f"   events committed {f['events_committed']:,} (transactions {self.emitter.get('transactions', 0):,}; "
            f"commit failures {f['commit_failures']}: {f['commits_resolved_committed']} had committed, {f['transactions_retried']} retried)",
            f"   events applied   {f['events_applied']:,} (each exactly once: {'yes' if not self.violations else 'NO'})"
            + (f"; {self.dead_lettered} marked to fail and dead-lettered" if self.dead_lettered else ""),
            f"   topic records    {f['topic_records']:,} ({f['topic_duplicates']} re-sent by Debezium/Kafka)",
            f"   consumed records {f['records_consumed']:,} in {self.consumer.get('batches', 0):,} batches; "
            f"duplicates absorbed by the dedupe marker {f['duplicates_absorbed']:,} "
            f"({f['duplicates_from_topic']} topic re-sends + {f['duplicates_from_redelivery']} consumer redeliveries); "
            f"transient pauses {f['transient_pauses']}; rebalance log lines {f['rebalances']}",
        ]
        for k in self.kills:
            rec = f"{k.recovery_s:.2f} s" if k.recovery_s is not None else "n/a"
            lines.append(f"   kill {k.component:<9} {k.note:<34} restart {k.restart_s:5.2f} s, recovery (kill → next committed event applied) {rec}")
        for e in self.evidence:
            lines.append(f"   evidence: {e}")
        for v in self.violations[:30]:
            lines.append(f"   VIOLATION: {v}")
        if len(self.violations) > 30:
            lines.append(f"   ... and {len(self.violations) - 30} more violations")
        return "\n".join(lines)


# -- a run -------------------------------------------------------------------------------------------------


class FaultRun:
    """One scenario: its own topic, group and keys; the shared stack's components to kill."""

    def __init__(self, scenario: str, tmp: Path, *, rate: float = 150, per_tx: int = 3, aggregates: int = 12,
                 members: int = 1, partitions: int = 1, batch_size: int = 50, sleep_ms: int = 2, limit: int | None = None,
                 consumer_env: dict[str, str] | None = None, session_timeout_ms: int | None = 6000,
                 log: Callable[[str], None] = print, redis_client: redis.Redis | None = None, restore_stack: bool = True,
                 kafka_bootstrap: str | None = None, connect_url: str | None = None, replication_factor: int = 1) -> None:
        self.scenario = scenario
        self.log = log
        self.settings = Settings.load()
        #: Where the topic lives and who captures the outbox: the stack's, or a private cluster's
        #: (``kafka_bootstrap`` / ``connect_url``: a scenario that kills nothing of the stack).
        self.kafka_bootstrap = kafka_bootstrap or self.settings.kafka_bootstrap
        self.connect_url = connect_url or self.settings.connect_url
        self.replication_factor = replication_factor
        self.stack = LocalStack()
        token = uuid.uuid4().hex[:8]
        self.aggregate_type = f"flt{scenario.replace('-', '')[:10]}{token}"
        self.topic = f"outbox.event.{self.aggregate_type}"
        self.group = f"faults-{scenario}-{token}"
        self.tmp = tmp
        schemas = tmp / "schemas"
        shutil.copytree(ROOT / "schemas" / "order", schemas / self.aggregate_type)
        self.codec = AvroCodec(SchemaRepository.load(schemas))
        self.outbox = Outbox(codec=self.codec)
        self.emitter = Emitter(self.settings.database_url, self.outbox, self.aggregate_type, aggregates,
                               rate=rate, per_tx=per_tx, limit=limit, log=log, check_url=admin_database_url())
        env = {
            "POSTBOX_GROUP": self.group, "POSTBOX_TOPICS": self.topic, "POSTBOX_SCHEMAS_DIR": str(schemas),
            "POSTBOX_BATCH_SIZE": str(batch_size),
            # None: postbox consume's default (the consumer SIGKILL scenario measures recovery with it)
            **({"POSTBOX_SESSION_TIMEOUT_MS": str(session_timeout_ms)} if session_timeout_ms is not None else {}),
            "POSTBOX_LOG_FORMAT": "json", "POSTBOX_LOG_LEVEL": "DEBUG", "POSTBOX_BACKOFF_MAX_MS": "2000",
            "POSTBOX_REDIS_URL": self.settings.redis_url, "POSTBOX_KAFKA_BOOTSTRAP": self.kafka_bootstrap,
            "POSTBOX_TEST_SLEEP_MS": str(sleep_ms),
            # deterministic kill points (tests.apps.counting, postbox.consumer.testhooks): armed per kill
            "POSTBOX_TEST_HOLD_IN_HANDLER": str(tmp / "hold-in-handler"),
            "POSTBOX_TEST_HOLD_BEFORE_COMMIT": str(tmp / "hold-before-commit"),
            **(consumer_env or {}),
        }
        self.holds = {"mid-batch": tmp / "hold-in-handler", "after-ack": tmp / "hold-before-commit"}
        self.partitions = partitions
        self.consumers = ConsumerGroup(env, tmp, members)
        from postbox.stack.stack import admin_redis_url

        #: Where the verdict reads the applied events: the stack's Redis, or the scenario's own
        #: (``redis_client``: a private topology, whose scenario kills nothing of the stack).
        self.redis = redis_client or redis.Redis.from_url(admin_redis_url(), socket_timeout=5, socket_connect_timeout=2)
        self.restore_stack = restore_stack
        self.kills: list[Kill] = []
        self.started = time.monotonic()
        self.evidence: list[str] = []
        self.violations: list[str] = []  # found during the run (a kill that missed its point)
        #: Records applied but not committed when an after-ack kill landed: each must come back.
        self.expect_redelivered = 0
        #: Per big-transaction Connect kill: the transaction's ids and each partition's end before it and at the kill.
        self.big_kills: list[tuple[list[str], dict[int, int], dict[int, int]]] = []
        self._watermarks: Consumer | None = None
        self._admin_client: AdminClient | None = None
        self._consumer_kills = 0
        #: How to replay this run (the mixed scenario's seed), named when a drain times out.
        self.replay = ""

    # lifecycle ----------------------------------------------------------------------------------------
    def start(self) -> "FaultRun":
        self.started = time.monotonic()
        create_topic(self.kafka_bootstrap, self.topic, self.partitions, self.replication_factor)  # else the router makes 1 partition
        self.emitter.start()
        self.consumers.start()
        self.wait(lambda: self.applied_count() > 0, 90, "the first event applied")
        return self

    def close(self) -> None:
        if self.emitter.is_alive():
            self.emitter.stop_flag.set()
            self.emitter.join(30)
        self.consumers.close()
        if self._watermarks is not None:
            self._watermarks.close()
        if self.restore_stack:
            self.ensure_stack()
        self.cleanup_keys()
        self.redis.close()

    def ensure_stack(self, attempts: int = 3) -> None:
        """Every component up and the connector RUNNING (what the next test expects). Right after
        a broker restart Connect's REST API can time out while its workers rejoin: ask again."""
        for attempt in range(1, attempts + 1):
            try:
                self.stack.up(lambda _m: None)
                return
            except (ConnectError, StackError) as exc:
                if attempt == attempts:
                    raise
                self.log(f"   [{self.scenario}] stack not up yet ({exc}); asking again")
                time.sleep(5)

    # observations -------------------------------------------------------------------------------------
    def _client(self) -> redis.Redis:
        return self.redis

    def applied_count(self) -> int:
        total = 0
        for agg in self.emitter.ids:
            try:
                total += self._client().llen(f"{{{self.aggregate_type}:{agg}}}:seq")
            except (redis.ConnectionError, redis.TimeoutError):
                return -1
        return total

    def is_applied(self, c: Committed) -> bool:
        return self._is_applied(c.aggregate_id, c.id)

    def _is_applied(self, aggregate_id: str, event_id: str) -> bool:
        try:
            return bool(self._client().hexists(f"{{{self.aggregate_type}:{aggregate_id}}}:applied", event_id))
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
            return False

    def topic_ends(self) -> dict[int, int]:
        """Each partition's end offset (high watermark) now."""
        if self._watermarks is None:
            self._watermarks = Consumer({"bootstrap.servers": self.kafka_bootstrap, "group.id": f"faults-marks-{uuid.uuid4().hex}"})
        return {p: self._watermarks.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10, cached=False)[1]
                for p in range(self.partitions)}

    def committed_offsets(self) -> dict[int, int]:
        """The group's committed offset of each partition (-1001: none yet)."""
        from tests.support.consumers import committed

        return committed(self.kafka_bootstrap, self.group, self.topic, self.partitions)

    def consumed_all(self) -> bool:
        """The group committed every record the topic holds now (and every committed event is in it)."""
        ends = self.topic_ends()
        return sum(ends.values()) >= self.emitter.count() and all(self.committed_offsets().get(p, -1) >= e for p, e in ends.items())

    def wait(self, predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.05,
             deadline: Callable[[], float] | None = None) -> float:
        """Seconds until ``predicate()``; ``deadline()``: when to give up, asked again each time
        (default: ``timeout`` after the start)."""
        started = time.monotonic()
        give_up = deadline or (lambda: started + timeout)
        while time.monotonic() < give_up():
            if self.emitter.error is not None:
                raise AssertionError(f"emitter failed: {self.emitter.error!r}")
            if predicate():
                return time.monotonic() - started
            time.sleep(interval)
        waited = time.monotonic() - started
        raise AssertionError(f"[{self.scenario}] timed out after {waited:.0f} s waiting for {what}; logs in {self.tmp}")

    def steady(self, seconds: float) -> None:
        """Let the load run (checking the consumers stay alive)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.consumers.check_alive()
            time.sleep(0.1)

    def recovery(self, killed_at: float, timeout: float = 150, component: str = "") -> float:
        """Seconds from the kill until the first event committed after it is applied."""
        self._wait_applied(lambda _count: self.emitter.first_after(killed_at) is not None, timeout, "an event committed after the kill",
                           recovering=f"{component or 'a component'} killed at +{killed_at - self.started:.1f}")
        first = self.emitter.first_after(killed_at)
        assert first is not None
        self._wait_applied(lambda _count: self.is_applied(first), timeout, f"event {first.id} (committed after the kill) applied",
                           recovering=f"{component or 'a component'} killed at +{killed_at - self.started:.1f}")
        return time.monotonic() - killed_at

    def _record(self, component: str, note: str, killed_at: float, restart_s: float) -> Kill:
        kill = Kill(component, note, self.recovery(killed_at, component=component), restart_s, at=killed_at)
        self.kills.append(kill)
        self.log(f"   [{self.scenario}] kill {component} ({note}): restart {restart_s:.2f} s, recovery {kill.recovery_s:.2f} s")
        return kill

    # kills ----------------------------------------------------------------------------------------------
    def _wait_ports_free(self, *ports: int, timeout: float = 30) -> None:
        """A SIGKILLed JVM's leader can be a zombie while its other threads still hold the sockets:
        restart only once its ports are free (the stack refuses a taken port)."""
        from postbox.stack.processes import port_open

        self.wait(lambda: not any(port_open("127.0.0.1", p) for p in ports), timeout, f"ports {ports} released after the kill", interval=0.1)

    def _claim(self, when: str) -> dict[str, Any]:
        """Arm the hold of ``when`` and wait until a consumer claims it (it then sleeps until killed)."""
        arm = self.holds[when]
        held = Path(f"{arm}.held")
        held.unlink(missing_ok=True)
        arm.write_text("")
        claim: dict[str, Any] = {}

        def claimed() -> bool:
            try:
                text = held.read_text().strip()
            except FileNotFoundError:
                return False
            if not text:
                return False  # claimed, details not written yet
            data = json.loads(text)
            claim.update(data if isinstance(data, dict) else {"pid": data})
            return True

        self.wait(claimed, 90, f"a consumer held {when}", interval=0.01)
        held.unlink()
        return claim

    def kill_consumer(self, when: str = "mid-batch", redeploy: str | None = None) -> Kill:
        """SIGKILL one consumer at an exact point of its loop, restart it (as ``redeploy``, an app
        spec, if given), and note the evidence that the kill landed there:

        - ``mid-batch``: its handler holds on an event (tests.apps.counting); that event must not
          be applied at the kill (the batch's apply had not run), and is applied once afterwards;
        - ``after-ack``: the runtime holds after a batch's apply was acknowledged and before its
          commit (postbox.consumer.testhooks); the batch's applied records must come back to the
          next owner as duplicates — the verdict checks that many were absorbed.
        """
        base = self.applied_count()
        self.wait(lambda: self.applied_count() > base, 60, "progress before the kill")
        claim = self._claim(when)
        pid = int(claim["pid"])
        [victim] = [p for p in self.consumers.processes if p.process.pid == pid]
        if when == "mid-batch":
            applied = self._is_applied(claim["aggregate_id"], claim["event_id"])
            where = f"{self.topic}[{claim['partition']}]@{claim['offset']}"
            evidence = f"held in its handler at {where}, not yet applied" if not applied else f"held at {where} ALREADY APPLIED"
            if applied:
                self.violations.append(f"mid-batch kill: the held event at {where} was applied before its batch finished")
        else:
            [*_, last] = self.consumers.batch_lines(victim.log_path) or [{}]
            applied_n = int(last.get("applied", 0))
            self.expect_redelivered += applied_n
            evidence = f"held after a batch applied {applied_n} of {last.get('records', 0)} records, uncommitted"
            if not applied_n:
                self.violations.append("after-ack kill: the held batch applied nothing, so nothing had to come back")
        totals = self.consumers.batch_totals()
        at, wall = time.monotonic(), time.time()
        self.consumers.kill_pid(pid)
        if redeploy:
            self.consumers.app_spec = redeploy
        t0 = time.monotonic()
        self.consumers.start()
        successor = self.consumers.processes[-1]
        kill = self._record("consumer", f"SIGKILL {when}" + (f", restarted as {redeploy.rsplit(':', 1)[-1]}" if redeploy else ""), at, time.monotonic() - t0)
        # The records the victim held must reach another member (after a rebalance) and pass again.
        if when == "mid-batch":
            self.wait(lambda: self._is_applied(claim["aggregate_id"], claim["event_id"]), 90, "the held event applied by the next owner")
            evidence += f"; applied by the next owner {time.monotonic() - at:.1f} s after the kill"
        else:
            def absorbed() -> bool:
                return self.consumers.batch_totals().get("duplicates", 0) >= totals.get("duplicates", 0) + applied_n

            # ... or applied again: more applications than committed events (the verdict names them)
            self.wait(lambda: absorbed() or self.applied_count() > self.emitter.count(), 90,
                      "the held batch redelivered", interval=0.5)
            evidence += f"; redelivered and {'absorbed' if absorbed() else 'APPLIED AGAIN'} {time.monotonic() - at:.1f} s after the kill"
        started, assigned = (self.consumers.first_line_at(successor.log_path, m) for m in ("consumer starting", "partitions assigned"))
        if started is not None and assigned is not None:  # where the recovery time goes (#14.3)
            evidence += f"; the restarted process logged its start {started - wall:.1f} s and had partitions {assigned - wall:.1f} s after the kill"
        if self.consumers.members > 1:
            evidence += f"; rebalance log lines since the kill {self.consumers.batch_totals().get('rebalances', 0) - totals.get('rebalances', 0)}"
        self.evidence.append(f"consumer SIGKILL {when}: {evidence}")
        return kill

    def kill_connect(self, note: str = "SIGKILL") -> Kill:
        before = self._signals()
        at = time.monotonic()
        assert self.stack.connect.kill(), "Connect was not running"
        self._wait_ports_free(self.stack.ports.connect)
        t0 = time.monotonic()
        self.ensure_stack()
        kill = self._record("connect", note, at, time.monotonic() - t0)
        self._noticed("connect", before)
        return kill

    def kill_connect_during_big_batch(self, size: int) -> Kill:
        """One transaction of ``size`` events (emit_many); SIGKILL Connect while it streams them.

        The writer pauses until the topic holds everything committed before, so the topic's growth
        from then on is this transaction alone: Connect is killed as soon as its first records are in
        the topic, and the ends at the kill say how much of it was out. The verdict requires some
        but not all of it out at the kill, or a part of it re-sent by Debezium after the restart."""
        self.emitter.paused.set()
        try:
            self.wait(lambda: self.applied_count() >= self.emitter.count(), 120, "the topic caught up before the big transaction")
            before = self.topic_ends()
            done = self.emitter.big_batch(size)
            if not done.wait(120):
                raise AssertionError("the big batch did not commit within 120 s")
            self.wait(lambda: sum(self.topic_ends().values()) > sum(before.values()), 120,
                      "the first records of the big transaction in the topic", interval=0.002)
            at = time.monotonic()
            assert self.stack.connect.kill(), "Connect was not running"
            at_kill = self.topic_ends()
        finally:
            self.emitter.paused.clear()
        self.big_kills.append((self.emitter.big_ids[-1], before, at_kill))
        out = sum(at_kill.values()) - sum(before.values())
        note = f"during a {size}-event emit_many ({out} of them in the topic at the kill)"
        self._wait_ports_free(self.stack.ports.connect)
        t0 = time.monotonic()
        self.ensure_stack()
        return self._record("connect", note, at, time.monotonic() - t0)

    def _signals(self) -> dict[str, int]:
        """What the consumers and the writer noticed so far (compared across a kill: the evidence it hit)."""
        totals = self.consumers.batch_totals()
        return {"pauses": totals.get("transient_pauses", 0), "kafka_errors": totals.get("kafka_errors", 0),
                "commit_failures": self.emitter.commit_failures, "resolved": self.emitter.resolved_committed,
                "retried": self.emitter.retried_transactions}

    def _noticed(self, component: str, before: dict[str, int]) -> None:
        after = self._signals()
        d = {k: after[k] - before[k] for k in after}
        text = {
            "kafka": f"the consumers logged {d['kafka_errors']} Kafka client error(s) while the broker was down",
            "redis": f"the consumers paused {d['pauses']} time(s) on a transient Redis failure",
            "postgres": f"{d['commit_failures']} emitting transaction(s) failed: {d['resolved']} had committed, {d['retried']} emitted again",
            "connect": "events committed while Connect was down were applied after its restart",
        }[component]
        self.evidence.append(f"{component} kill: {text}")

    def kill_kafka(self, note: str = "SIGKILL + restart") -> Kill:
        before = self._signals()
        at = time.monotonic()
        assert self.stack.kafka.kill(), "Kafka was not running"
        self._wait_ports_free(self.stack.ports.kafka, self.stack.ports.controller)
        t0 = time.monotonic()
        self.ensure_stack()
        kill = self._record("kafka", note, at, time.monotonic() - t0)
        self._noticed("kafka", before)
        return kill

    def kill_redis(self, note: str = "SIGKILL right after an ack, AOF restart") -> Kill:
        base = self.applied_count()
        self.wait(lambda: self.applied_count() > base, 60, "an apply acknowledged", interval=0.005)
        before = self._signals()
        at = time.monotonic()
        assert self.stack.redis.kill(), "Redis was not running"
        self._wait_ports_free(self.stack.ports.redis)
        t0 = time.monotonic()
        self.stack.redis.start()
        kill = self._record("redis", note, at, time.monotonic() - t0)
        self._noticed("redis", before)
        return kill

    def stop_postgres(self, note: str = "immediate stop + restart") -> Kill:
        before = self._signals()
        at = time.monotonic()
        assert self.stack.postgres.stop(mode="immediate"), "PostgreSQL was not running"
        time.sleep(1.0)
        t0 = time.monotonic()
        self.ensure_stack()
        kill = self._record("postgres", note, at, time.monotonic() - t0)
        self._noticed("postgres", before)
        return kill

    # events that fail on purpose, and a dead-letter topic that fails ---------------------------------------
    def emit_marked(self, kind: str, aggregate: str, followers: int = 3, payload_bytes: int | None = None) -> None:
        """Commit one ``kind`` event ("poison": its handler always fails; "flaky": fails on its first
        attempt in a process) of ``aggregate``, followed in the same transaction by ``followers``
        ordinary events of the same aggregate (so they share its batch); ``payload_bytes``: pad its
        Avro payload to exactly that size."""
        schema = self.codec.schema_for(self.aggregate_type, "OrderPlaced", None)

        def customer_of(seq: int) -> str:
            if payload_bytes is None:
                return f"{kind}:"
            pad = 0
            for _ in range(6):  # the string's length prefix grows with it: converge in a few steps
                pad += payload_bytes - len(self.codec.encode_with(schema, _payload(aggregate, seq, f"{kind}:" + "x" * pad)))
            assert len(self.codec.encode_with(schema, _payload(aggregate, seq, f"{kind}:" + "x" * pad))) == payload_bytes
            return f"{kind}:" + "x" * pad

        done = self.emitter.special(aggregate, 1 + followers, customer_of)
        if not done.wait(120):
            raise AssertionError(f"the {kind} transaction did not commit within 120 s")
        size = f" ({payload_bytes:,}-byte payload)" if payload_bytes else ""
        self.log(f"   [{self.scenario}] committed a {kind} event{size} of {aggregate} + {followers} followers")

    def _admin(self) -> AdminClient:
        if self._admin_client is None:  # kept: a dropped client cancels its pending requests
            self._admin_client = AdminClient({"bootstrap.servers": self.kafka_bootstrap})
        return self._admin_client

    def block_dead_letters(self) -> None:
        """Create the dead-letter topic so that the broker refuses every produce to it, until
        unblocked: its ``max.message.bytes`` is below even a reference-only dead letter. (A
        ``min.insync.replicas`` above the replica count does not do it: this Kafka accepts
        acks=all on a single replica anyway.)"""
        name = self.topic + ".dlq"
        topic = NewTopic(name, num_partitions=self.partitions, replication_factor=1, config={"max.message.bytes": "64"})
        self._admin().create_topics([topic])[name].result(timeout=30)

    def unblock_dead_letters(self) -> None:
        resource = ConfigResource(ResourceType.TOPIC, self.topic + ".dlq", incremental_configs=[
            ConfigEntry("max.message.bytes", str(1_048_588 + 65_536), incremental_operation=AlterConfigOpType.SET)])
        for future in self._admin().incremental_alter_configs([resource]).values():
            future.result(timeout=30)

    def dead_letter_failures(self) -> int:
        """Transient pauses the consumers logged because a dead-letter produce was not acknowledged."""
        return sum(1 for path in self.tmp.glob("consumer-*.log") for line in path.read_text(errors="replace").splitlines()
                   if '"transient failure: partition paused' in line and '"dlq"' in line)

    KILLS = ("consumer", "connect", "kafka", "redis", "postgres")

    def kill(self, component: str) -> Kill:
        """Kill ``component`` (consumers alternately mid-batch and after the ack)."""
        if component == "consumer":
            self._consumer_kills += 1
            return self.kill_consumer("mid-batch" if self._consumer_kills % 2 else "after-ack")
        return {"connect": self.kill_connect, "kafka": self.kill_kafka,
                "redis": self.kill_redis, "postgres": self.stop_postgres}[component]()

    # verdict -------------------------------------------------------------------------------------------------
    def verdict(self, drain_timeout: float = 180, *, until_consumed: bool = False) -> Verdict:
        """Drain, then list every violation. ``until_consumed``: the drain ends once the group has
        committed every record of the topic (a run expected to lose events cannot wait for them)."""
        self.emitter.stop()
        committed = list(self.emitter.committed)
        by_id = {c.id: c for c in committed}
        # Marked events (tests.apps.counting) fail on purpose: "poison" ones must be dead-lettered,
        # "flaky" ones applied (in order) or dead-lettered; neither may block what follows them.
        marked = {i for ids in self.emitter.marked.values() for i in ids}

        def unapplied_marked() -> set[str]:
            return {i for i in marked if not self._is_applied(by_id[i].aggregate_id, i)}

        if until_consumed:
            self.wait(self.consumed_all, drain_timeout, "the group's offsets committed to the end of the topic", interval=0.5)
        else:
            self._wait_applied(lambda count: count >= len(committed) - len(unapplied_marked()), drain_timeout,
                               f"all {len(committed)} committed events applied or dead-lettered", skip=marked, interval=0.2)
        time.sleep(1.5)  # late redeliveries would show now
        violations: list[str] = list(self.violations)
        violations += [f"clean stop: {problem}" for problem in self.consumers.stop()]
        not_applied = unapplied_marked()
        for eid in set(self.emitter.marked.get("poison", [])) - not_applied:
            violations.append(f"applied: poison event {eid}, whose handler always fails")

        by_agg: dict[str, list[Committed]] = defaultdict(list)
        for c in committed:
            by_agg[c.aggregate_id].append(c)
        committed_ids = {c.id for c in committed}
        applied_total = 0
        for agg in self.emitter.ids:
            k = f"{{{self.aggregate_type}:{agg}}}"
            seqs = [int(x) for x in self.redis.lrange(f"{k}:seq", 0, -1)]
            counts = {kk.decode(): int(v) for kk, v in self.redis.hgetall(f"{k}:applied").items()}
            expected = [c.seq for c in by_agg[agg] if c.id not in not_applied]
            applied_total += sum(counts.values())
            if seqs != expected:
                missing = sorted(set(expected) - set(seqs))
                doubled = sorted(s for s, n in Counter(seqs).items() if n > 1)
                extra = sorted(set(seqs) - set(expected))
                for s in missing:
                    violations.append(f"lost: aggregate {agg} seq {s} committed, never applied")
                for s in doubled:
                    violations.append(f"applied twice: aggregate {agg} seq {s}")
                for s in extra:
                    violations.append(f"applied but never committed: aggregate {agg} seq {s}")
                if not (missing or doubled or extra):
                    at = next(i for i, (a, b) in enumerate(zip(seqs, expected)) if a != b)
                    violations.append(f"out of order: aggregate {agg}: applied ...{seqs[max(0, at - 3):at + 5]}... "
                                      f"expected ...{expected[max(0, at - 3):at + 5]}...")
            for eid, n in counts.items():
                if n != 1:
                    violations.append(f"applied {n} times: event {eid} (aggregate {agg})")
                if eid not in committed_ids:
                    violations.append(f"applied but never committed: event {eid} (aggregate {agg})")
        located = read_topic(self.kafka_bootstrap, self.topic)
        records = [eid for _p, _o, eid in located]
        per_id = Counter(r for r in records)
        in_topic = set(per_id)
        for c in committed:
            if c.id not in in_topic:
                violations.append(f"lost: event {c.id} (aggregate {c.aggregate_id} seq {c.seq}) committed but not in {self.topic}")
        for eid in in_topic - committed_ids:
            violations.append(f"in the topic but never committed: event {eid}")
        consumer = self.consumers.batch_totals()
        topic_dupes = len(records) - len(in_topic)
        if consumer.get("duplicates", 0) < topic_dupes:
            violations.append(f"the consumers absorbed {consumer.get('duplicates', 0)} duplicates but the topic holds {topic_dupes} repeated records")
        if consumer.get("failed", 0) and not marked:
            violations.append(f"{consumer['failed']} records dead-lettered (none expected)")
        violations += self._dead_letter_checks(not_applied, located)
        violations += self._evidence_checks(committed, located, consumer, topic_dupes)
        return Verdict(
            scenario=self.scenario, committed=len(committed), applied=applied_total, topic_records=len(records),
            topic_duplicates=topic_dupes, consumer=consumer,
            emitter={"transactions": self.emitter.transactions, "commit_failures": self.emitter.commit_failures,
                     "resolved_committed": self.emitter.resolved_committed,
                     "retried_transactions": self.emitter.retried_transactions,
                     "big_batches": len(self.emitter.big_batches)},
            kills=list(self.kills), seconds=time.monotonic() - self.started, violations=violations,
            evidence=list(self.evidence), dead_lettered=len(not_applied),
        )

    def _wait_applied(self, done: Callable[[int], bool], timeout: float, what: str, *, skip: set[str] | None = None,
                      interval: float = 0.05, recovering: str = "") -> None:
        """Wait until ``done(applied count)``; on a timeout the AssertionError says what is stuck
        (:mod:`tests.faults.stall`: the CI output is all there is to go on). ``skip``: events
        allowed to stay unapplied (marked to fail); ``recovering``: the kill being recovered from."""
        count = self.applied_count()
        drain = Drain(time.monotonic(), count, count)

        def finished() -> bool:
            self.consumers.check_alive()  # a consumer that exited is the answer now, not after the timeout
            return done(drain.saw(self.applied_count()))

        try:
            waited = self.wait(finished, timeout, what, interval=interval, deadline=lambda: drain.deadline(timeout))
        except AssertionError as exc:
            with self.emitter.lock:
                committed = list(self.emitter.committed)
            headline, details = stall_report(self, committed, skip or set(), drain, recovering)
            raise AssertionError(f"{exc} (at {drain.last_count} applied) -- {headline}\n{details}") from None
        if waited > timeout:  # the host was slow, not the pipeline stuck: say so beside the figures
            self.evidence.append(f"waited {waited:.0f} s (past its {timeout:.0f} s) for {what}: the consumers kept applying "
                                 f"({drain.last_count - drain.count_at_start} events during the wait)")

    def _dead_letter_checks(self, not_applied: set[str], located: list[tuple[int, int, str]]) -> list[str]:
        """Every marked event that was not applied is in the dead-letter topic (by its id header or
        its origin partition/offset: a record too large goes there as metadata)."""
        if not self.emitter.marked:
            return []
        where = {eid: (p, o) for p, o, eid in located}
        found: set[str] = set()
        reference_only: set[str] = set()

        def all_found() -> bool:
            dead = read_records(self.kafka_bootstrap, self.topic + ".dlq", timeout=60)
            for _p, _o, h in dead:
                origin = (int(h.get("postbox.origin.partition", -1)), int(h.get("postbox.origin.offset", -1)))
                ids = {i for i in not_applied if h.get("id") == i or where.get(i) == origin}
                found.update(ids)
                if h.get("postbox.reference-only") == "true":
                    reference_only.update(ids)
            return found >= not_applied

        try:
            self.wait(all_found, 60, "the marked events that were not applied in the dead-letter topic", interval=1)
        except AssertionError:
            pass
        for kind, ids in sorted(self.emitter.marked.items()):
            n_dead = len(found & set(ids))
            n_ref = len(reference_only & set(ids))
            self.evidence.append(f"{kind} events: {len(ids)}; dead-lettered {n_dead}" + (f" ({n_ref} reference-only)" if n_ref else "")
                                 + f", applied {len(set(ids) - not_applied)}")
        return [f"neither applied nor dead-lettered: event {i} ({by.aggregate_id} seq {by.seq})"
                for i in sorted(not_applied - found) for by in [self.emitter_by_id(i)]]

    def emitter_by_id(self, eid: str) -> Committed:
        return next(c for c in self.emitter.committed if c.id == eid)

    def _evidence_checks(self, committed: list[Committed], located: list[tuple[int, int, str]],
                         consumer: dict[str, int], topic_dupes: int) -> list[str]:
        """Checks that the scenario happened and that the figures above could see it; adds its evidence."""
        violations = []
        batches, seen = consumer.get("batches", 0), consumer.get("records", 0)
        if not batches:
            violations.append("no 'batch finished' line in the consumer logs: the duplicate and dead-letter checks saw nothing")
        if seen < len(committed):
            violations.append(f"the consumer logs account for {seen} records but {len(committed)} events committed")
        redelivered = consumer.get("duplicates", 0) - topic_dupes
        if self.expect_redelivered:
            self.evidence.append(f"after-ack kills left {self.expect_redelivered} applied records uncommitted; "
                                 f"{redelivered} redeliveries absorbed by the dedupe marker")
            if redelivered < self.expect_redelivered:
                violations.append(f"after-ack kills left {self.expect_redelivered} applied records uncommitted, "
                                  f"but only {redelivered} redelivered duplicates were absorbed")
        partitions_used = {p for p, _o, _e in located}
        if self.partitions > 1:
            self.evidence.append(f"records on {len(partitions_used)} of {self.partitions} partitions, "
                                 f"{consumer.get('rebalances', 0)} rebalance log lines over {self.consumers._n} consumer processes")
        for ids, before, at_kill in self.big_kills:
            wanted = set(ids)
            copies = Counter(e for _p, _o, e in located if e in wanted)
            out_at_kill = len({e for p, o, e in located if e in wanted and before[p] <= o < at_kill[p]})
            resent = sum(n - 1 for n in copies.values())
            self.evidence.append(f"Connect SIGKILL during a {len(ids)}-event transaction: {out_at_kill} in the topic at the kill, "
                                 f"{resent} re-sent by Debezium after the restart")
            if not (0 < out_at_kill < len(ids) or resent > 0):
                violations.append(f"the Connect kill missed the big transaction: {out_at_kill} of {len(ids)} out at the kill, none re-sent")
        return violations

    def cleanup_keys(self) -> None:
        try:
            keys = [f"{{{self.aggregate_type}:{a}}}:{p}" for a in self.emitter.ids for p in ("seq", "count", "applied")]
            keys.append(f"{{{self.aggregate_type}}}:v2:tally")  # tests.apps.counting:audited_v2
            self.redis.delete(*keys)
        except redis.RedisError:
            pass


def read_topic(bootstrap: str, topic: str, timeout: float = 120) -> list[tuple[int, int, str]]:
    """Every record's (partition, offset, ``id`` header), from the beginning to the current end of every partition."""
    return [(p, o, h.get("id") or f"<no id at {p}@{o}>") for p, o, h in read_records(bootstrap, topic, timeout)]


def read_records(bootstrap: str, topic: str, timeout: float = 120) -> list[tuple[int, int, dict[str, str]]]:
    """Every record's (partition, offset, headers), from the beginning to the current end of every
    partition; [] when the topic does not exist."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"faults-read-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        meta = consumer.list_topics(topic, timeout=15).topics[topic]
        if meta.error is not None:
            return []
        ends = {}
        for p in meta.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)
            if high > low:
                ends[p] = (low, high)
        consumer.assign([TopicPartition(topic, p, low) for p, (low, _h) in ends.items()])
        out: list[tuple[int, int, dict[str, str]]] = []
        position = {p: low for p, (low, _h) in ends.items()}
        deadline = time.monotonic() + timeout
        while any(position[p] < ends[p][1] for p in ends) and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                if msg.error():
                    continue
                position[msg.partition()] = msg.offset() + 1
                headers = {k: v.decode("utf-8", "replace") for k, v in msg.headers() or [] if v is not None}
                out.append((msg.partition(), msg.offset(), headers))
        if any(position[p] < ends[p][1] for p in ends):
            raise AssertionError(f"could not read {topic} to its end within {timeout:.0f} s: {position} vs {ends}")
        return out
    except KafkaException as exc:
        raise AssertionError(f"reading {topic}: {exc}") from exc
    finally:
        consumer.close()


def soak_enabled(config: Any = None) -> bool:
    if os.environ.get("POSTBOX_SOAK", "") not in ("", "0"):
        return True
    return bool(config is not None and config.getoption("--soak", default=False))
