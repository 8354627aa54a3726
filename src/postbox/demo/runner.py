"""One demo run, start to verdict.

1. the stack (``postbox up`` unless POSTBOX_* point elsewhere), the shop's SQL, one run at a time
   per database (advisory lock), the previous run's keys, rows and consumer groups cleared;
2. stock on the shelves, cards on file (some of them the declined test card);
3. three consumer groups of this run (``postbox-demo-<run>-<name>``) positioned at the topics'
   end, then one ``postbox consume consumers.shop.<name>:app`` process each;
4. the orders, placed by the order service (a few with the v1 schema, a few cancelled later),
   while the view shows every stage; ``--chaos`` SIGKILLs consumers and the Connect worker;
5. the drain: every group has applied what the services' tables say it must;
6. the consumers stop, the invariants are checked, the verdict and the summary are printed.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import httpx
import psycopg
import redis

from consumers.shop import setup as shop_setup
from consumers.shop.orders import cancel_order, place_order
from consumers.shop.payment_service import DECLINED_CARD, GOOD_CARD
from postbox.demo.invariants import Check, Scope, applied_totals, check_invariants, expected_events, load_orders
from postbox.demo.monitor import GroupMetrics, Rates, ReadyLog, lag_of, quantiles, scrape
from postbox.demo.processes import GROUP_APPS, ConsumerProcess, child_env
from postbox.demo.view import Snapshot, View, final_report, fmt_s
from postbox.effects import groups
from postbox.errors import PostboxError
from postbox.stack.checkout import checkout_root
from postbox.stack.layout import default_state_dir
from postbox.secret_env import env_value
from postbox.settings import ENV_NAMES, Settings
from postbox.topics import topic_for

TOPICS = (topic_for("order"), topic_for("payment"))
GROUP_TOPICS = {"inventory": TOPICS, "payment": (topic_for("order"),), "shipping": TOPICS}
GROUP_PREFIX = "postbox-demo-"
LOCK_KEY = "postbox-demo"
SKUS = [f"SKU-{n:03d}" for n in range(1, 25)]
STOCK_PER_SKU = 100_000


class DemoError(PostboxError):
    """The demo could not run (as opposed to running and finding a broken invariant)."""


@dataclass
class DemoConfig:
    orders: int = 3000
    fail_rate: float = 0.10        # share of orders paid with the declined test card
    cancel_rate: float = 0.05      # share of orders the customer cancels shortly after placing
    v1_rate: float = 0.10          # share of orders from a client still on OrderPlaced v1
    rate: float = 0.0              # orders per second, 0 = as fast as the database takes them
    chaos: bool = False
    drain_timeout: float = 300.0
    live: bool | None = None       # None: live view when the stream is a terminal
    seed: int | None = None
    admin_url: str | None = None
    bring_up: bool | None = None   # None: `postbox up` unless POSTBOX_* point at another stack
    kafka_config: str | None = None  # librdkafka properties file (--kafka-config), else POSTBOX_KAFKA_CONFIG
    kafka_set: tuple[str, ...] = ()  # -X key=value over it


@dataclass
class DemoResult:
    run_id: str
    passed: bool
    checks: list[Check]
    summary: dict[str, Any]
    scope: Scope
    log_dir: Path

    def as_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "passed": self.passed, "checks": [c.as_dict() for c in self.checks],
                "summary": self.summary, "log_dir": str(self.log_dir)}


class Demo:
    def __init__(self, config: DemoConfig, stream: TextIO | None = None) -> None:
        self.cfg = config
        self.stream = stream or sys.stdout
        self.live = config.live if config.live is not None else self.stream.isatty()
        self.run_id = uuid.uuid4().hex[:6]
        self.rng = random.Random(config.seed)
        self.scope = Scope(order_prefix=f"o-{self.run_id}-",
                           groups={name: f"{GROUP_PREFIX}{self.run_id}-{name}" for name in GROUP_APPS})
        self.log_dir = default_state_dir() / "demo" / self.run_id  # the stack's folder (POSTBOX_STATE_DIR)
        self.processes: dict[str, ConsumerProcess] = {}
        self.metrics = {name: GroupMetrics() for name in GROUP_APPS}
        self.notes: list[str] = []
        self.placed = 0
        self.cancelled = 0
        self.v1 = 0
        self.place_error: BaseException | None = None
        self.placing_done = threading.Event()
        self.stop_placing = threading.Event()
        self.chaos_actions: list[str] = []
        self.started = time.monotonic()
        self.first_order_at: float | None = None
        self.drained_at: float | None = None
        self._chaos_threads: list[threading.Thread] = []

    # -- helpers ---------------------------------------------------------------------------------
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def note(self, text: str) -> None:
        self.notes.append(f"{self.elapsed():5.1f}s {text}")

    # -- the run ---------------------------------------------------------------------------------
    def run(self) -> DemoResult:
        view = View(f"postbox demo · run {self.run_id} · {self.cfg.orders:,} orders"
                    + (" · chaos" if self.cfg.chaos else ""), live=self.live, stream=self.stream)
        say = view.note
        settings, admin_url = self._stack(say)
        self.settings = settings
        # The demo resets and inspects the shop's keys: an administrator's job, done as Redis's
        # admin user (POSTBOX_ADMIN_REDIS_URL, else the local stack's). Its consumers run as the
        # limited consumer user of POSTBOX_REDIS_URL, like any user's consumers.
        from postbox.stack.stack import admin_redis_url

        self.redis = redis.Redis.from_url(admin_redis_url())
        from postbox.kafka_cluster import Kafka

        self.kafka = Kafka(settings.kafka_bootstrap, timeout=10, properties=settings.kafka_properties)
        lock_conn = psycopg.connect(admin_url, autocommit=True, connect_timeout=10)
        try:
            self._lock(lock_conn, say)
            say(f"shop SQL: {', '.join(shop_setup.apply_sql(admin_url))} applied")
            self._reset(admin_url, say)
            self._seed(settings)
            self._position_groups()
            self._start_consumers(settings, say)
            checks, summary = self._watch(view, admin_url)
        finally:
            self.stop_placing.set()
            for t in self._chaos_threads:
                t.join(timeout=240)
            for proc in self.processes.values():
                proc.stop()
            # The run's groups are single-use (short marker TTL): out of the registry, so that
            # `postbox doctor` does not hold their TTL against the topics' redelivery window.
            groups.unpublish(self.redis, *self.scope.groups.values())
            try:
                lock_conn.close()
            except Exception:
                pass
            self.kafka.close()
        passed = all(c.ok for c in checks)
        final_report(view.console, checks, [(k, _show(v)) for k, v in summary.items() if not k.startswith("_")], passed)
        self.redis.close()
        return DemoResult(self.run_id, passed, checks, summary, self.scope, self.log_dir)

    def _stack(self, say: Callable[[str], None]) -> tuple[Settings, str]:
        external = [var for var in ENV_NAMES.values() if os.environ.get(var)]
        bring_up = self.cfg.bring_up if self.cfg.bring_up is not None else not external
        admin_url = self.cfg.admin_url or env_value("POSTBOX_ADMIN_DATABASE_URL")
        if bring_up:
            from postbox.stack.stack import LocalStack

            stack = LocalStack()
            report = stack.up(lambda m: say(f"… {m}"))
            say("stack: " + ("started" if report.changed else "already up") + f" ({report.seconds:.1f} s)")
            admin_url = admin_url or stack.postgres.admin_url()
        elif admin_url is None:
            try:
                from postbox.stack.stack import admin_database_url

                admin_url = admin_database_url()
            except Exception as exc:  # noqa: BLE001
                raise DemoError("the demo needs an admin connection to create the shop's tables",
                                fix="pass --admin-url (or POSTBOX_ADMIN_DATABASE_URL) for a superuser or the database owner") from exc
        from postbox.stack.addresses import local_stack_env

        settings = Settings.load(kafka_config=self.cfg.kafka_config, kafka_set=self.cfg.kafka_set, local=local_stack_env())
        return settings, admin_url

    def _lock(self, conn: psycopg.Connection[Any], say: Callable[[str], None]) -> None:
        deadline = time.monotonic() + 600
        told = False
        while not conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (LOCK_KEY,)).fetchone()[0]:
            if time.monotonic() > deadline:
                raise DemoError("another `postbox demo` has held this database for 10 minutes",
                                fix="wait for it to finish (one demo at a time per database)")
            if not told:
                say("another `postbox demo` is running on this stack; waiting for it to finish…")
                told = True
            time.sleep(1)

    def _reset(self, admin_url: str, say: Callable[[str], None]) -> None:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute("TRUNCATE shop.orders, payments.payments, payments.cards")
        keys = shop_setup.reset_redis(self.redis)
        old = 0
        for pattern in (f"postbox:*:seen:{GROUP_PREFIX}*", f"postbox:*failures:{GROUP_PREFIX}*"):
            batch = []
            for key in self.redis.scan_iter(match=pattern, count=2000):
                batch.append(key)
                if len(batch) >= 1000:
                    old += self.redis.unlink(*batch)
                    batch = []
            if batch:
                old += self.redis.unlink(*batch)
        registered = [g for g in groups.read(self.redis) if g.startswith(GROUP_PREFIX)]
        groups.unpublish(self.redis, *registered)  # runs that died before their own clean-up
        old_groups = [g for g in self.kafka.group_ids() if g.startswith(GROUP_PREFIX)]
        if old_groups:
            try:
                for fut in self.kafka.admin.delete_consumer_groups(old_groups, request_timeout=10).values():
                    try:
                        fut.result()
                    except Exception:  # noqa: BLE001 - a group still in use elsewhere stays
                        pass
            except Exception:  # noqa: BLE001
                pass
        say(f"reset: previous run's rows, {keys + old} Redis keys and {len(old_groups)} consumer group(s) removed")

    def _seed(self, settings: Settings) -> None:
        shop_setup.seed_stock(self.redis, {sku: STOCK_PER_SKU for sku in SKUS})
        n_customers = 300
        declined = max(1, round(n_customers * 0.1))
        self.good_customers = [f"c-{self.run_id}-{n:04d}" for n in range(n_customers - declined)]
        self.declined_customers = [f"c-{self.run_id}-{n:04d}" for n in range(n_customers - declined, n_customers)]
        with psycopg.connect(settings.database_url) as conn:
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO payments.cards (customer_id, card_number) VALUES (%s, %s)",
                    [(c, GOOD_CARD) for c in self.good_customers] + [(c, DECLINED_CARD) for c in self.declined_customers],
                )
            conn.commit()

    def _position_groups(self) -> None:
        """Create the topics if missing, and commit each new group at their current end."""
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
        from confluent_kafka.admin import NewTopic

        missing = [t for t in TOPICS if not self.kafka.topic_exists(t)]
        if missing:
            futures = self.kafka.admin.create_topics([NewTopic(t, num_partitions=3, replication_factor=-1) for t in missing])
            for fut in futures.values():
                try:
                    fut.result(timeout=15)
                except Exception:  # noqa: BLE001 - created concurrently (Debezium): fine
                    pass
            self.kafka.metadata(refresh=True)
        self.start_ends = self._ends(wait=30.0)
        for name, group in self.scope.groups.items():
            offsets = [TopicPartition(t, p, high) for t in GROUP_TOPICS[name]
                       for p, (_low, high) in self.start_ends[t].items() if high > 0]
            if not offsets:
                continue
            request = ConsumerGroupTopicPartitions(group, offsets)
            for fut in self.kafka.admin.alter_consumer_group_offsets([request], request_timeout=15).values():
                fut.result(timeout=20)

    def _ends(self, wait: float = 0.0, previous: dict[str, Any] | None = None) -> dict[str, dict[int, tuple[int, int]]]:
        """Every topic's (low, high) watermarks; a new topic may need a moment to get its leaders."""
        deadline = time.monotonic() + wait
        while True:
            try:
                return {t: self.kafka.watermarks(t) for t in TOPICS}
            except Exception:  # noqa: BLE001 - leader election of a new topic, a broker hiccup
                if previous is not None:
                    return previous
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
                self.kafka.metadata(refresh=True)

    def _start_consumers(self, settings: Settings, say: Callable[[str], None]) -> None:
        env = child_env(settings.as_env(), {
            "POSTBOX_SESSION_TIMEOUT_MS": "10000",   # a SIGKILLed member's partitions move within 10 s
            "POSTBOX_BATCH_WAIT_MS": "20",
            "POSTBOX_MARKER_TTL": "1d",              # demo groups are single-use
            "POSTBOX_HOME": str(checkout_root()),
        })
        if settings.kafka_properties:  # file and -X alike, to a private file: no secrets on argv
            env["POSTBOX_KAFKA_CONFIG"] = str(settings.kafka_properties.write(self.log_dir / "kafka.properties"))
        for name in GROUP_APPS:
            proc = ConsumerProcess(name, self.scope.groups[name], checkout_root(), env, self.log_dir)
            proc.start()
            self.processes[name] = proc
        say(f"consumers: {', '.join(f'{n} (pid {p.pid})' for n, p in self.processes.items())}; logs in {self.log_dir}")
        deadline = time.monotonic() + 90
        with httpx.Client() as client:
            waiting = set(self.processes)
            while waiting:
                for name in sorted(waiting):
                    proc = self.processes[name]
                    if not proc.alive():
                        raise DemoError(f"the {name} consumer exited with code {proc.exit_code()} at start:\n{proc.log_tail()}",
                                        fix=f"see {proc.log_dir / (name + '.log')}")
                    s = scrape(client, proc.port)
                    if s is not None and s.counters.get("assigned", 0) > 0:
                        waiting.discard(name)
                if time.monotonic() > deadline:
                    raise DemoError(f"consumer(s) {', '.join(sorted(waiting))} got no partitions within 90 s",
                                    fix=f"see the logs in {self.log_dir}")
                time.sleep(0.3)
        say("consumers: every group has its partitions")

    # -- the order service's load ------------------------------------------------------------
    def _place_orders(self) -> None:
        try:
            cfg = self.cfg
            with psycopg.connect(self.settings.database_url) as conn:
                conn.autocommit = True      # each place/cancel opens its own transaction
                pending_cancels: list[tuple[int, str]] = []
                interval = 1.0 / cfg.rate if cfg.rate > 0 else 0.0
                next_at = time.monotonic()
                for n in range(cfg.orders):
                    if self.stop_placing.is_set():
                        break
                    if interval:
                        delay = next_at - time.monotonic()
                        if delay > 0:
                            time.sleep(delay)
                        next_at += interval
                    order_id = f"{self.scope.order_prefix}{n:06d}"
                    declined = self.rng.random() < cfg.fail_rate
                    customer = self.rng.choice(self.declined_customers if declined else self.good_customers)
                    lines = [{"sku": sku, "quantity": self.rng.randint(1, 3), "unit_price_cents": self.rng.choice((499, 1250, 2999, 8900))}
                             for sku in self.rng.sample(SKUS, self.rng.randint(1, 3))]
                    v1 = self.rng.random() < cfg.v1_rate
                    if v1:
                        place_order(conn, order_id, customer, lines, schema_version=1)
                        self.v1 += 1
                    else:
                        place_order(conn, order_id, customer, lines, currency="EUR",
                                    coupon="WELCOME10" if self.rng.random() < 0.1 else None)
                    if self.first_order_at is None:
                        self.first_order_at = time.monotonic()
                    self.placed += 1
                    if self.rng.random() < cfg.cancel_rate:
                        # Some right away (often before the payment), some after a while.
                        pending_cancels.append((n + self.rng.choice((0, 1, 5, 50, 200)), order_id))
                    due = [c for c in pending_cancels if c[0] <= n]
                    for c in due:
                        pending_cancels.remove(c)
                        if cancel_order(conn, c[1], reason="customer changed their mind"):
                            self.cancelled += 1
                for _, order_id in pending_cancels:
                    if cancel_order(conn, order_id, reason="customer changed their mind"):
                        self.cancelled += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the main loop
            self.place_error = exc
        finally:
            self.placing_done.set()

    # -- chaos ---------------------------------------------------------------------------------
    def _chaos_plan(self) -> list[tuple[float, str]]:
        return [(0.25, "payment"), (0.45, "connect"), (0.65, "inventory")] if self.cfg.chaos else []

    def _chaos(self, what: str) -> None:
        if what == "connect":
            def restart_connect() -> None:
                from postbox.stack.stack import LocalStack

                try:
                    stack = LocalStack(locate_tools=False)
                    pid = stack.connect.pid()
                    stack.connect.kill()
                    self.note(f"chaos: SIGKILL Kafka Connect worker (pid {pid}); Debezium stops reading the WAL")
                    self.chaos_actions.append("SIGKILL Connect worker")
                    time.sleep(2)
                    started = time.monotonic()
                    LocalStack().up(lambda m: None)
                    self.note(f"chaos: Connect worker back, connector RUNNING after {time.monotonic() - started:.1f} s")
                except Exception as exc:  # noqa: BLE001
                    self.note(f"chaos: restarting Connect failed: {exc}")
            t = threading.Thread(target=restart_connect, name="chaos-connect", daemon=True)
            t.start()
            self._chaos_threads.append(t)
            return
        proc = self.processes[what]
        pid = proc.kill()
        self.note(f"chaos: SIGKILL {what} consumer (pid {pid}) mid-batch; restarting it")
        self.chaos_actions.append(f"SIGKILL {what} consumer")
        time.sleep(1.0)
        proc.start()

    # -- watch and drain --------------------------------------------------------------------
    def _tend_consumers(self, http: httpx.Client) -> None:
        """Restart a consumer that exited while orders are still placed; scrape each one's metrics."""
        for name, proc in self.processes.items():
            if not proc.alive() and not self.stop_placing.is_set():
                self.note(f"{name} consumer exited (code {proc.exit_code()}); restarting it\n{proc.log_tail(5)}")
                proc.start()
            self.metrics[name].update(proc.generation, scrape(http, proc.port))

    def _group_rows(self, snap: Snapshot, totals: dict[str, int], ends: Any, rates: Rates, now: float) -> dict[str, int]:
        """Fill the view's row of each consumer group; return each group's lag (-1: unknown this round)."""
        lags: dict[str, int] = {}
        for name, group in self.scope.groups.items():
            m = self.metrics[name]
            try:
                lags[name] = lag_of(self.kafka, group, GROUP_TOPICS[name], ends)
            except Exception:  # noqa: BLE001 - shown as unknown this round
                lags[name] = -1
            snap.groups[name] = {
                "applied": totals[name], "rate": rates.add(name, totals[name], now), "lag": lags[name],
                "duplicates": m.counter("duplicates"), "dead": m.counter("dead_lettered"), "latency": m.latency(),
            }
        return lags

    def _watch(self, view: View, admin_url: str) -> tuple[list[Check], dict[str, Any]]:
        placer = threading.Thread(target=self._place_orders, name="order-service", daemon=True)
        ready_log = ReadyLog(self.redis)
        rates = Rates()
        plan = self._chaos_plan()
        snap = Snapshot(orders_target=self.cfg.orders)
        settled = False
        drain_deadline: float | None = None
        last_expected_check = 0.0
        expected: dict[str, int] | None = None
        check_conn = psycopg.connect(admin_url, autocommit=True)
        self.started_orders = time.monotonic()
        placer.start()
        http = httpx.Client()
        ends = self.start_ends
        try:
            with view:
                while True:
                    now = time.monotonic()
                    snap.elapsed = self.elapsed()
                    # chaos triggers on progress, so they land mid-stream whatever the speed
                    while plan and self.placed >= plan[0][0] * self.cfg.orders:
                        self._chaos(plan.pop(0)[1])
                    self._tend_consumers(http)
                    ends = self._ends(previous=ends)
                    kafka_total = sum(h - self.start_ends.get(t, {}).get(p, (0, 0))[1] for t in TOPICS for p, (_l, h) in ends[t].items())
                    ready_log.poll()
                    totals = applied_totals(self.redis)
                    snap.placed, snap.cancelled = self.placed, self.cancelled
                    snap.place_rate = rates.add("placed", self.placed, now)
                    snap.kafka_total, snap.kafka_rate = kafka_total, rates.add("kafka", kafka_total, now)
                    lags = self._group_rows(snap, totals, ends, rates, now)
                    snap.ready, snap.ready_rate = ready_log.ready_now(), rates.add("ready", ready_log.count, now)
                    snap.saga_latency = quantiles(ready_log.latencies)
                    snap.events = self.notes
                    if self.place_error is not None:
                        raise DemoError(f"the order service failed: {self.place_error}")
                    if self.placing_done.is_set() and not plan:
                        if drain_deadline is None:
                            drain_deadline = now + self.cfg.drain_timeout
                            snap.phase = "draining"
                            self.note(f"order service done: {self.placed} placed, {self.cancelled} cancelled; draining")
                        if now - last_expected_check > 1.0:
                            last_expected_check = now
                            expected = expected_events(load_orders(check_conn, self.scope.order_prefix))
                            undecided = check_conn.execute(
                                "SELECT count(*) FROM shop.orders o LEFT JOIN payments.payments p ON p.order_id = o.id"
                                " WHERE o.id LIKE %s AND p.order_id IS NULL", (self.scope.order_prefix + "%",)).fetchone()[0]
                            connect_busy = any(t.is_alive() for t in self._chaos_threads)
                            if (not undecided and not connect_busy and all(totals[g] >= expected[g] for g in expected)
                                    and not any(lags.values())):
                                settled = True
                        if settled:
                            self.drained_at = now
                            snap.phase = "drained"
                            self.note("every group applied every event; stopping the consumers")
                            view.update(snap, force=True)
                            break
                        if now > drain_deadline:
                            self.note(f"not drained after {self.cfg.drain_timeout:.0f} s: checking anyway")
                            view.update(snap, force=True)
                            break
                    else:
                        snap.phase = "placing orders" + (" (chaos)" if self.cfg.chaos else "")
                    view.update(snap)
                    time.sleep(max(0.0, 0.5 - (time.monotonic() - now)))
            for proc in self.processes.values():
                proc.stop()
            checks = check_invariants(self.redis, check_conn, self.scope)
            if not settled:
                checks.insert(0, Check("pipeline drained", False,
                                       f"applied {totals} of expected {expected} within {self.cfg.drain_timeout:.0f} s"))
        finally:
            http.close()
            check_conn.close()
        return checks, self._summary(snap, ready_log)

    def _summary(self, snap: Snapshot, ready_log: ReadyLog) -> dict[str, Any]:
        facts = self.scope.facts
        span = (self.drained_at or time.monotonic()) - (self.first_order_at or self.started)
        applied = {n: g.get("applied", 0) for n, g in snap.groups.items()}
        lat = quantiles(ready_log.latencies)
        out: dict[str, Any] = {
            "run id": self.run_id,
            "orders placed": f"{self.placed} ({self.v1} as OrderPlaced v1, {self.placed - self.v1} as v2)",
            "ready to ship": facts.get("ready"),
            "compensated": f"{facts.get('orders', 0) - facts.get('ready', 0)} "
                           f"({facts.get('payment_failed', 0)} payment failed, {facts.get('cancelled', 0)} cancelled, "
                           f"{facts.get('refunded', 0)} refunds)",
            "events through Kafka": snap.kafka_total,
            "events applied": ", ".join(f"{n} {int(v)}" for n, v in applied.items()),
            "duplicates skipped": int(sum(self.metrics[n].counter("duplicates") for n in self.metrics)),
            "dead letters": int(sum(facts.get("dead_letters", {}).values())),
            "orders/s end to end": round(self.placed / span, 1) if span > 0 else None,
            "events applied/s (all groups)": round(sum(applied.values()) / span, 1) if span > 0 else None,
            "saga latency placed → ready p50/p95/p99": " / ".join(fmt_s(lat[k]) for k in ("p50", "p95", "p99")),
        }
        for name in GROUP_APPS:
            group_lat = self.metrics[name].latency()
            out[f"{name}: created → applied p50/p95/p99"] = " / ".join(fmt_s(group_lat[k]) for k in ("p50", "p95", "p99"))
        out["chaos"] = ", ".join(self.chaos_actions) if self.chaos_actions else "off"
        out["wall time"] = f"{self.elapsed():.1f} s"
        out["_figures"] = {
            "saga_latency_s": lat, "orders_per_s": out["orders/s end to end"],
            "events_per_s": out["events applied/s (all groups)"], "wall_s": round(self.elapsed(), 1),
            "group_latency_s": {n: self.metrics[n].latency() for n in GROUP_APPS},
        }
        return out


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return json.dumps(value)
    return "–" if value is None else str(value)


def run_demo(config: DemoConfig | None = None, stream: TextIO | None = None) -> DemoResult:
    return Demo(config or DemoConfig(), stream).run()
