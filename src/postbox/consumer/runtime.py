"""The consumer loop: Kafka batch → decode → handlers → one engine.apply → dead letters → commit.

One thread, one ``confluent_kafka.Consumer`` (cooperative-sticky, manual offsets). Per batch:

1. ``consume(batch_size)``; records of partitions that are revoked or waiting out a backoff are
   dropped (they will be fetched again from the first unapplied offset).
2. Each record is decoded and routed (:mod:`postbox.consumer.decoding`: an event or the record's
   own failure, never an exception); its handler fills a fresh :class:`~postbox.effects.Effects`.
   Async handlers of one batch run concurrently on one event loop. A handler's exception is
   classified by :mod:`postbox.consumer.handler_errors`: retried in place (``handler_retries``,
   each attempt with a fresh ``Effects``), transient, or permanent.
3. Failures known before the apply (decode, unknown type, handler) go to the failure stream and
   ``<topic>.dlq`` (acknowledged); a partition whose dead letter is not acknowledged is blocked
   at that record, and nothing after it is applied (order per aggregate).
4. One ``engine.apply`` for the other events of the batch (the engine packs them into script calls
   of 128), then ``engine.durability()`` must hold (``require_durable``). On Redis Cluster the
   apply is per node and partial: records a node that is down held back are *held*
   (:meth:`Batch.hold`) and ride into the next batch, while their partitions keep flowing.
5. Effect failures are dead-lettered the same way; one whose dead letter is not acknowledged keeps
   its verdict (``PartitionState.owed``): the retry only writes the dead letter.
6. Per partition, the offset the batch model (:mod:`postbox.consumer.batch`: each record's fate
   and each partition's block, pure and unit-tested) says is finished is committed (asynchronously; the
   revoke callback and shutdown commit synchronously whatever the broker has not confirmed, see
   :mod:`postbox.consumer.partition_state`).

Transient failures (Redis refused or unreachable, durability not confirmed, DLQ produce not
acknowledged, a handler's dependency down) stop the affected partitions at their
first unfinished record: nothing at or after it is committed, the partition is paused and, after
an exponential backoff with jitter, resumed and sought back to that record. Other partitions keep
flowing. Re-applying is safe: events whose effects already landed come back as duplicates.
"""

from __future__ import annotations

import asyncio
from contextlib import nullcontext
import logging
import os
import signal
import threading
import time
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

import redis
from confluent_kafka.admin import AdminClient
from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, KafkaException, Message, TopicPartition

from postbox import failure_classes as classes
from postbox.failure_classes import redis_error_code as _error_code  # noqa: F401 - its old name here, kept for importers
from postbox import kafka_config
from postbox.codec import AvroCodec, EventHeaders
from postbox.consumer import health, testhooks, tracing
from postbox.consumer.app import App, Route
from postbox.consumer.backoff import Backoff
from postbox.consumer.batch import Batch, Fate
from postbox.consumer.config import ConsumerConfig
from postbox.consumer.decoding import Decoder, parse_created_at
from postbox.consumer.invoke import HandlerFailed, Invoker, Job, Outcome
from postbox.consumer.fencing import FenceAction, FencePolicy
from postbox.consumer.instance import instance_fenced
from postbox.consumer.deadletter import DeadLetters, Failure, Origin, one_line
from postbox.consumer.event_scope import event_scope
from postbox.consumer.logs import event_context, log_context, log_event
from postbox.consumer.metrics import Metrics
from postbox.consumer.partition_state import PartitionState, pending
from postbox.effects import ApplyResult, Effects, EffectsEngine, EventRef
from postbox.errors import ConfigError, EffectEngineError, TransientEffectError
from postbox.events import Event
from postbox.redis_client import check_not_cluster_node
from postbox.redis_client import connect as connect_redis
from postbox.settings import redact_url

log = logging.getLogger("postbox.consumer")

#: Commit failures that mean "this member's view of the group is stale": never fatal, the
#: partitions' next owner re-reads from the last committed offset and its duplicates are skipped.
REBALANCE_COMMIT_ERRORS = {
    KafkaError.REBALANCE_IN_PROGRESS,
    KafkaError.ILLEGAL_GENERATION,
    KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError.FENCED_INSTANCE_ID,
    KafkaError._ASSIGNMENT_LOST,
}
LAG_INTERVAL_S = 5.0
#: Held records (Redis Cluster node down) a partition may carry, in batches: past it, it pauses.
HELD_PER_BATCH = 4
#: Synchronous commit attempts at shutdown before giving up (the records are then redelivered).
FINAL_COMMIT_ATTEMPTS = 5

#: Longest wait for the revoke of an orderly stop before closing (static members, see _leave_group).
LEAVE_WAIT_S = 10.0

EXIT_OK = 0
EXIT_ENGINE_ERROR = 3


class Stopped(Exception):
    """Raised inside start-up waits when a stop was requested."""


class _Item:
    """One record on its way through a batch."""

    __slots__ = ("msg", "tp", "offset", "event", "route", "ref", "fx", "failure", "attempts", "exc")

    def __init__(self, msg: Message) -> None:
        self.msg = msg
        self.tp = (msg.topic(), msg.partition())
        self.offset: int = msg.offset()
        self.event: Event | None = None
        self.route: Route | None = None
        self.ref: EventRef | None = None
        self.fx: Effects | None = None
        self.failure: Failure | None = None
        self.attempts = 0
        #: The handler exception behind ``failure`` (its traceback is logged with the dead letter).
        self.exc: BaseException | None = None


class ConsumerRuntime:
    """Runs an :class:`App` against Kafka and Redis with ``config``. See the module docs.

    ``redis_client``: a ``redis.Redis``/``RedisCluster`` with bytes replies (default: from
    ``config.redis_url``). ``install_signals``: handle SIGTERM/SIGINT (main thread only) by
    finishing the batch, committing and leaving the group; otherwise call :meth:`stop`.
    ``kafka_overrides``: extra librdkafka consumer properties.
    """

    def __init__(
        self,
        app: App,
        config: ConsumerConfig,
        *,
        redis_client: "redis.Redis | redis.RedisCluster | None" = None,
        metrics: Metrics | None = None,
        install_signals: bool = True,
        kafka_overrides: dict[str, Any] | None = None,
    ) -> None:
        self.app = app
        self.config = config
        self.metrics = metrics or Metrics(config.group)
        self.install_signals = install_signals
        self.kafka_overrides = dict(kafka_overrides or {})
        self.redis = redis_client or connect_redis(
            config.redis_url, socket_timeout=10, socket_connect_timeout=5, health_check_interval=30
        )
        self.engine = EffectsEngine(self.redis, config.group, marker_ttl=config.marker_ttl, legacy_markers=config.legacy_markers)
        self.backoff = Backoff(config.backoff_base_ms / 1000, config.backoff_max_ms / 1000)
        self.client_id = config.client_id or f"postbox-{config.group}-{os.getpid()}"
        self.states: dict[tuple[str, int], PartitionState] = {}
        self.consumer: Consumer | None = None
        self.dead_letters: DeadLetters | None = None
        self.codec: AvroCodec | None = None
        #: Replaced by one with the schema codec once it is loaded at start-up.
        self.decoder = Decoder(app, None)
        self._stop = threading.Event()
        #: Runs handlers; its event loop (async handlers; made on first use) is closed at shutdown.
        self.invoker = Invoker(config.handler_retries, self.backoff, asyncio.Runner(), self._handler_retry,
                               scope=lambda event: event_scope(event, config.group))  # log context, span
        self._next_lag = 0.0
        self._last_kafka_error = ("", 0.0)
        #: Set when librdkafka reports a refused login or TLS handshake, or that another process
        #: uses this instance id (fenced): the consumer stops on a configuration error.
        self._config_failure: ConfigError | None = None
        self._assigned_once = False
        #: Set when the broker fenced this static member and it is to rejoin with a new client
        #: (:mod:`postbox.consumer.fencing`); the loop does it between batches.
        self._rejoin: str | None = None
        self._fences = FencePolicy()
        #: Records held back by a Redis Cluster node that is down (:meth:`Batch.hold`): decoded and
        #: handled, they ride into the next batch ahead of Kafka's records until they apply.
        self._carried: list[_Item] = []
        self._carried_ends: dict[tuple[str, int], int] = {}
        self._carried_due = 0.0
        self._m_topic: dict[str, tuple[Any, Any, Any, Any]] = {}
        #: /healthz: when the loop last turned; stale past max.poll.interval.ms (Kafka's own limit).
        self.liveness = health.Liveness(config.max_poll_interval_ms / 1000)
        self.http: health.HealthServer | None = None
        #: Set once the consumer has subscribed (tests and the bench wait on it).
        self.ready = threading.Event()

    # -- lifecycle ---------------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the loop to finish its batch, commit and leave (thread-safe, idempotent)."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self) -> int:
        """Run until :meth:`stop` (or a signal). Returns the process exit code."""
        previous = self._install_signals() if self.install_signals else {}
        try:
            # every line of the run carries the group; start-up hooks before, shutdown hooks after
            with log_context(group=self.config.group), self.app.started():
                return self._run()
        except Stopped:
            return EXIT_OK
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _run(self) -> int:
        cfg = self.config
        log_event(log, logging.INFO, "consumer starting", app=repr(self.app), **cfg.describe())
        self.codec = self._load_codec()
        self.decoder = Decoder(self.app, self.codec)
        tracing.refresh()  # the app's tracer provider, if it configures one, is set by now
        if cfg.metrics_port:
            self._serve_http()
        self._wait_for_redis()
        self.dead_letters = DeadLetters(cfg.kafka_bootstrap, cfg.group, client_id=self.client_id + "-dlq",
                                        properties=cfg.kafka_properties)  # fmt: skip
        self.consumer = kafka_config.open_client(Consumer, self._kafka_config(), cfg.kafka_properties)
        code = EXIT_OK
        try:
            self._subscribe()
            self.ready.set()
            while not self._stop.is_set():
                self.liveness.beat()  # /healthz: the loop turns
                if self._rejoin is not None:
                    self._rejoin_group()
                self._resume_due()
                messages = self.consumer.consume(cfg.batch_size, self._poll_timeout())
                if messages or (self._carried and time.monotonic() >= self._carried_due):
                    self._process(messages)
                    testhooks.hold_before_commit()  # inert outside the fault suite
                self._commit()
                self._update_lag()
        except (EffectEngineError, ConfigError) as exc:  # e.g. an ACL refusal, Redis credentials revoked
            kind = "configuration error" if isinstance(exc, ConfigError) else "effects engine error"
            log_event(log, logging.ERROR, f"{kind}: stopping without committing the batch", error=str(exc))
            code = EXIT_ENGINE_ERROR
        finally:
            self._shutdown(commit=code == EXIT_OK and self._config_failure is None)
        return self._after_config_failure(code)

    def _serve_http(self) -> None:
        """``/metrics``, ``/healthz``, ``/readyz`` on ``metrics_host:metrics_port`` (:mod:`postbox.consumer.health`)."""
        cfg = self.config
        ready = health.Probe({
            "partitions": health.partitions_check(lambda: len(self.states)),
            "redis": health.redis_check(self.redis),
            "kafka": health.kafka_check(self._open_probe_admin),
            "durability": health.durability_check(self.engine, cfg.require_durable),
        })  # fmt: skip
        live = health.Probe({"loop": self.liveness.check})
        self.http = health.HealthServer(cfg.metrics_host, cfg.metrics_port, self.metrics.registry, live, ready).start()
        base = f"http://{cfg.metrics_host}:{cfg.metrics_port}"
        log_event(log, logging.INFO, "metrics and health endpoints up", metrics=f"{base}/metrics", healthz=f"{base}/healthz", readyz=f"{base}/readyz")

    def _open_probe_admin(self) -> AdminClient:
        """The readiness probe's Kafka client (its errors are the probe's answer, not log lines)."""
        conf = kafka_config.build(self.config.kafka_bootstrap, self.config.kafka_properties,
                                  kafka_config.admin_role(self.client_id + "-health"), error_cb=lambda _err: None)  # fmt: skip
        return kafka_config.open_client(AdminClient, conf, self.config.kafka_properties)

    def _subscribe(self) -> None:
        assert self.consumer is not None
        topics = list(self.config.topics)
        self.consumer.subscribe(topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost)
        log_event(log, logging.INFO, "consumer subscribed", group=self.config.group, topics=",".join(topics))

    def _rejoin_group(self) -> None:
        """Replace the fenced Kafka client with a new one under the same instance id (see
        :mod:`postbox.consumer.fencing`). Its partitions are dropped like lost ones: nothing more is
        committed for them by the old client, and the new member resumes from the committed offsets
        (records applied since come back as duplicates)."""
        assert self.consumer is not None
        old, self.consumer, detail, self._rejoin = self.consumer, None, self._rejoin, None
        self.states.clear()
        self._drop_carried()
        self._refresh_gauges()
        try:
            old.close()
        except (KafkaException, RuntimeError) as exc:
            log.warning("closing the fenced Kafka client: %s", exc)
        log_event(log, logging.WARNING, "fenced by the broker: rejoining with a new client under the same instance id",
                  instance_id=self.config.static_instance_id, error=detail)  # fmt: skip
        self.consumer = kafka_config.open_client(Consumer, self._kafka_config(), self.config.kafka_properties)
        self._subscribe()

    def _fenced(self, detail: str) -> None:
        """The broker fenced this static member: rejoin once, stop if it happens again soon."""
        if self._rejoin is not None or self._config_failure is not None:
            return  # the same fence reported again (librdkafka's error and its fatal error)
        if self._fences.on_fence(time.monotonic()) is FenceAction.REJOIN:
            self._rejoin = detail
            return
        self._config_failure = instance_fenced(self.config.instance_id, detail)
        log_event(log, logging.ERROR, "fenced again by another member with this instance id: stopping (a configuration error)",
                  error=self._config_failure.message, fix=self._config_failure.fix)  # fmt: skip
        self._stop.set()

    def _after_config_failure(self, code: int) -> int:
        """A refused Kafka login or a fenced instance id is a configuration error: at start-up (no
        partition was ever assigned) it is raised for the CLI to print with its fix (exit 1);
        later it is exit 3."""
        if self._config_failure is None:
            return code
        if not self._assigned_once:
            raise self._config_failure
        return EXIT_ENGINE_ERROR

    def _shutdown(self, *, commit: bool) -> None:
        if self.consumer is not None:
            if commit:
                self._final_commit()
            if self.config.static_instance_id is not None and self._config_failure is None:
                # A static member's close() sends no LeaveGroup (KIP-345): its partitions would
                # wait session.timeout.ms. Unsubscribing first leaves the group, so an orderly
                # stop hands them over at once; only a crash keeps them for the restart.
                try:
                    self._leave_group()
                except (KafkaException, RuntimeError) as exc:
                    log.warning("leaving the group before closing: %s", exc)
            try:
                self.consumer.close()  # leaves the group; the revoke callback commits nothing new
            except (KafkaException, RuntimeError) as exc:
                log.warning("closing the Kafka consumer: %s", exc)
            self.consumer = None
        if self.dead_letters is not None:
            self.dead_letters.close()
        self.invoker.runner.close()
        if self.http is not None:
            self.http.close()
            self.http = None
        log_event(log, logging.INFO, "consumer stopped", group=self.config.group)

    def _leave_group(self) -> None:
        """Unsubscribe and serve the revoke (which commits) until the assignment is empty: the
        LeaveGroup goes out when the unassign is done, and close() would suppress it for a static
        member if the unassign finished after close() had started."""
        assert self.consumer is not None
        self.consumer.unsubscribe()
        deadline = time.monotonic() + LEAVE_WAIT_S
        while self.consumer.assignment() and time.monotonic() < deadline:
            self.consumer.poll(0.1)
        self.consumer.poll(0.1)

    def _install_signals(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous: dict[int, Any] = {}

        def handler(signum: int, _frame: Any) -> None:
            if self._stop.is_set():  # a second signal: stop now (uncommitted work is redelivered)
                raise KeyboardInterrupt
            log_event(log, logging.INFO, "signal received: finishing the batch, committing, leaving the group", signal=signal.Signals(signum).name)
            self._stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, handler)
        return previous

    def _kafka_config(self) -> dict[str, Any]:
        """The group consumer's librdkafka configuration (:mod:`postbox.kafka_config` owns it)."""
        conf, _ = self.config.kafka_client_configs(self.client_id)
        return {**conf, "on_commit": self._on_commit, "error_cb": self._on_kafka_error, **self.kafka_overrides}

    def _load_codec(self) -> AvroCodec | None:
        from postbox.consumer.reader_schemas import load_reader_codec

        return load_reader_codec(self.app, self.config)

    def _wait_for_redis(self) -> None:
        attempt = 0
        while True:
            try:
                # first: a Cluster node named as a single server would fail every write with MOVED
                check_not_cluster_node(self.redis, self.config.redis_url)
                self.engine.load()
                durability = self.engine.durability(refresh=True)
                break
            except TransientEffectError as exc:
                attempt += 1
                delay = self.backoff.delay(attempt)
                log_event(log, logging.WARNING, "waiting for Redis", error=str(exc), attempt=attempt, retry_in_s=round(delay, 2))
                if self._stop.wait(delay):
                    raise Stopped() from None
        if not durability.durable:
            if self.config.require_durable:
                raise ConfigError(
                    f"Redis at {redact_url(self.config.redis_url)} is {durability}",
                    fix="set appendonly yes and appendfsync always (or use Redis 7.2+ for WAITAOF), "
                    "or accept possible double application after a Redis crash with --require-durable false",
                )
            log_event(log, logging.WARNING, "Redis is not durable: a Redis crash can lose acknowledged effects and markers", reason=durability.reason)
        else:
            log_event(log, logging.INFO, "Redis effects are durable", method=durability.method)

    # -- rebalance callbacks (run inside consume(), between batches) --------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        consumer.incremental_assign(partitions)
        consumer.resume(partitions)  # a partition paused before it was revoked starts fresh
        self._assigned_once = True
        for tp in partitions:
            self.states[(tp.topic, tp.partition)] = PartitionState(tp.topic, tp.partition)
        self.metrics.rebalances.labels(self.config.group, "assigned").inc(len(partitions))
        self.metrics.assigned.labels(self.config.group).set(len(self.states))
        log_event(log, logging.INFO, "partitions assigned", partitions=_show(partitions), total=len(self.states))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # No batch is in flight here (one thread: callbacks run inside consume()), so every
        # state's ``done`` is final: commit exactly what was applied or dead-lettered.
        keys = [(tp.topic, tp.partition) for tp in partitions]
        self._commit(sync=True, only=keys)
        for key in keys:
            self.states.pop(key, None)
            try:
                self.metrics.lag.remove(self.config.group, key[0], str(key[1]))
            except KeyError:
                pass
        self._drop_carried()  # the next owner re-reads them
        self.metrics.rebalances.labels(self.config.group, "revoked").inc(len(partitions))
        self._refresh_gauges()
        log_event(log, logging.INFO, "partitions revoked", partitions=_show(partitions), total=len(self.states))

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Lost (session expired): another member may own them already; committing would fail or,
        # worse, move its offsets. Drop the state; the new owner re-reads from the last commit.
        for tp in partitions:
            self.states.pop((tp.topic, tp.partition), None)
        self._drop_carried()
        self.metrics.rebalances.labels(self.config.group, "lost").inc(len(partitions))
        self._refresh_gauges()
        log_event(log, logging.WARNING, "partitions lost (session timed out); their uncommitted records go to the next owner", partitions=_show(partitions))

    def _on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        failed = [tp for tp in partitions if tp.error is not None]
        if err is None and not failed:
            self.metrics.commits.labels(self.config.group, "ok").inc()
            self._commit_outcome(partitions, confirmed=True)
            return
        code = err.code() if err is not None else failed[0].error.code()
        if code == KafkaError._NO_OFFSET:
            return
        self.metrics.commits.labels(self.config.group, "rebalance" if code in REBALANCE_COMMIT_ERRORS else "error").inc()
        for tp in failed or partitions:
            state = self.states.get((tp.topic, tp.partition))
            if state is not None:
                state.commit_failed()
        # During a rebalance (ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS) this is expected: the
        # revoke callback commits synchronously with the new generation.
        level = logging.INFO if code in REBALANCE_COMMIT_ERRORS else logging.WARNING
        log_event(log, level, "async offset commit failed; the next commit resends it (a new owner would redeliver past it and skip the duplicates)",
                  error=str(err or failed[0].error), partitions=_show(failed or partitions))

    def _on_kafka_error(self, err: KafkaError) -> None:
        if kafka_config.is_login_failure(err.name(), err.str()):
            self._config_failure = kafka_config.login_error(self.config.kafka_bootstrap, self.config.kafka_properties, err.str())
            log_event(log, logging.ERROR, "Kafka refused the login: stopping (a configuration error)", error=self._config_failure.message)
            self._stop.set()
            return
        # librdkafka reports its fatal errors to error_cb as code _FATAL, with fatal() False.
        fatal = err.fatal() or err.code() == KafkaError._FATAL
        if _is_fence(err, fatal):
            self._fenced(err.str())
            return
        if fatal:
            log_event(log, logging.ERROR, "fatal Kafka error", error=str(err))
            self._stop.set()
            return
        text, when = self._last_kafka_error
        now = time.monotonic()
        if str(err) != text or now - when > 30:
            self._last_kafka_error = (str(err), now)
            log_event(log, logging.WARNING, "Kafka client error (retrying)", error=str(err))

    # -- the batch ---------------------------------------------------------------------------------

    def _process(self, messages: list[Message]) -> None:
        carried, self._carried = self._carried, []
        items = carried + self._take(messages)  # held records first: they precede Kafka's in their partitions
        if not items:
            return
        batch = Batch.of(((i.tp, i.offset) for i in items), held_limit=HELD_PER_BATCH * self.config.batch_size, ends=self._carried_ends)
        # 1. decode and route (a record whose dead letter is still owed keeps its verdict)
        for item in items[len(carried):]:
            owed = self._owed(item)
            if owed is not None:
                item.failure = owed
            else:
                self._prepare(item)
        # 2. handlers (sync in order; async of the whole batch concurrently)
        self._run_handlers(items, batch)
        # 3. failures known before the apply are dead-lettered (acknowledged) first: a partition
        #    whose dead letter is not acknowledged is blocked there, so nothing after it applies.
        self._dead_letter([i for i in items if _is_permanent(i)], batch)
        # 4. one apply for the batch; 5. effect failures dead-lettered (their verdict is kept)
        to_apply = [i for i in items if i.fx is not None and i.failure is None and not batch.covers(i.tp, i.offset)]
        results = self._apply(items, to_apply, batch)
        self._dead_letter([i for i in to_apply if _is_permanent(i)], batch, owe=True)
        # 6. what is finished per partition; back off the blocked ones
        if log.isEnabledFor(logging.DEBUG):
            self._log_batch(items, results, batch)
        self._finish(batch, items)

    def _take(self, messages: list[Message]) -> list[_Item]:
        """The batch's records of partitions that are assigned and not waiting out a backoff."""
        items: list[_Item] = []
        for msg in messages:
            err = msg.error()
            if err is not None:
                self._record_error(err)
                continue
            state = self.states.get((msg.topic(), msg.partition()))
            if state is None or state.resume_at is not None:
                continue  # revoked, or waiting out a backoff: fetched again after the seek
            items.append(_Item(msg))
        if items:
            self.metrics.batch_size.labels(self.config.group).observe(len(items))
            for item in items:
                self._topic_metrics(item.tp[0])[0].inc()
        return items

    def _owed(self, item: _Item) -> Failure | None:
        state = self.states.get(item.tp)
        return state.owed.get(item.offset) if state is not None else None

    def _run_handlers(self, items: list[_Item], batch: Batch) -> None:
        """Sync handlers in offset order (a transient failure stops its partition there); the async
        ones of the batch gathered on the consumer's loop (:mod:`postbox.consumer.invoke`)."""
        pending: list[tuple[_Item, Job]] = []
        for item in items:
            route, event = item.route, item.event
            if route is None or event is None or item.failure is not None or item.fx is not None or batch.covers(item.tp, item.offset):
                continue  # item.fx set: a held record, its handler already ran
            if route.is_async:
                pending.append((item, (route.handler, route.name, event, route.transient)))
                continue
            _settle(item, self.invoker.call(route.handler, route.name, event, route.transient))
            _block_transient(item, batch)
        if pending:
            outcomes = self.invoker.gather([job for _, job in pending])
            for (item, _), outcome in zip(pending, outcomes):
                _settle(item, outcome)
                _block_transient(item, batch)

    def _handler_retry(self, name: str, event: Event, exc: BaseException, attempt: int) -> None:
        self.metrics.handler_retries.labels(self.config.group).inc()
        log_event(log, logging.WARNING, "handler raised; retrying in place", handler=name, error=f"{type(exc).__name__}: {exc}",
                  attempt=attempt, topic=event.topic, partition=event.partition, offset=event.offset)

    def _apply(self, items: list[_Item], to_apply: list[_Item], batch: Batch) -> "list[ApplyResult]":
        """One engine.apply for ``to_apply``; a transient failure blocks each partition at its
        first record applied here (failures before it are already dead-lettered)."""
        if not to_apply:
            return []
        started, started_ns = time.perf_counter(), time.time_ns()
        try:
            try:
                results = self.engine.apply([(i.ref, i.fx) for i in to_apply], **self._per_node(to_apply))
                durability = self.engine.durability()
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                raise TransientEffectError(f"Redis unreachable: {exc}", reason="connection") from exc
            if not durability.durable and self.config.require_durable:
                raise TransientEffectError(f"Redis is {durability}", reason="not-durable")
        except TransientEffectError as exc:
            for item in to_apply:
                batch.block(item.tp, item.offset, exc.reason, str(exc))
            return []
        self.metrics.apply_seconds.labels(self.config.group).observe(time.perf_counter() - started)
        if tracing.enabled():
            tracing.record_applies([(i.event, _apply_result(r)) for i, r in zip(to_apply, results) if i.event is not None],
                                   self.config.group, started_ns, time.time_ns())  # fmt: skip
        self._account(to_apply, results, batch)
        return results

    def _drop_carried(self) -> None:
        """Forget the held records of partitions no longer assigned (their next owner re-reads
        them from the last commit, which is before them)."""
        self._carried = [i for i in self._carried if i.tp in self.states]
        self._carried_ends = {tp: end for tp, end in self._carried_ends.items() if tp in self.states}

    def _per_node(self, items: list[_Item]) -> dict[str, Any]:
        """On Redis Cluster, apply partially (a node that is down holds back only its records, see
        :meth:`Batch.hold`), keeping each partition's Kafka key in order across nodes."""
        if not self.engine.cluster:
            return {}
        return {"partial": True, "order": [(i.tp, i.msg.key()) for i in items]}

    def _dead_letter(self, failed: list[_Item], batch: Batch, *, owe: bool = False) -> None:
        """Failure stream, then ``<topic>.dlq`` (acknowledged). A record whose dead letter is not
        written blocks its partition there; with ``owe`` (effect failures: records after it are
        already applied) its verdict is kept, so the retry dead-letters it without running it
        again — it can never take effect after a later event of its aggregate."""
        failed = [i for i in failed if not batch.covers(i.tp, i.offset)]
        if not failed:
            return
        assert self.dead_letters is not None
        try:
            self.dead_letters.record(self.engine, [(Origin.of(i.msg), i.event.id if i.event else _header_id(i.msg), i.failure) for i in failed])  # type: ignore[misc]
        except TransientEffectError as exc:
            for item in failed:
                self._owe(item, owe)
                batch.block(item.tp, item.offset, exc.reason, str(exc))
            return
        outcome = self.dead_letters.send([(Origin.of(i.msg), i.failure) for i in failed])  # type: ignore[misc]
        for item, error in zip(failed, outcome):
            state = self.states.get(item.tp)
            if error is None:
                batch.finished(item.tp, item.offset, Fate.DEAD_LETTERED)
                self._dead_lettered(item)
                if state is not None:
                    state.owed.pop(item.offset, None)
            else:
                self._owe(item, owe)
                batch.block(item.tp, item.offset, "dlq", error)

    def _owe(self, item: _Item, owe: bool) -> None:
        state = self.states.get(item.tp)
        if owe and state is not None and item.failure is not None:
            state.owed[item.offset] = replace(item.failure, recorded=True)

    def _finish(self, batch: Batch, items: list[_Item]) -> None:
        """Move each still-assigned partition's commit position to what the batch model says is
        finished; pause the ones to retry (a partition revoked meanwhile is left alone); carry the
        held records into the next batch."""
        positions = batch.positions(self.states)
        held = {(tp, offset) for tp, position in positions.items() for offset in position.hold}
        self._carried = [i for i in items if (i.tp, i.offset) in held]
        self._carried_ends = {tp: batch.end(tp) for tp, position in positions.items() if position.hold and position.retry is None}
        if self._carried:
            self._carried_due = time.monotonic() + self.backoff.base_s
        for tp, position in positions.items():
            state = self.states[tp]
            state.done = position.commit if state.done is None else max(state.done, position.commit)
            if position.retry is not None:
                self._pause(state, position.retry.offset, position.retry.reason, position.retry.error)
            else:
                state.failures = 0

    def _log_batch(self, items: list[_Item], results: "list[ApplyResult]", batch: Batch) -> None:
        """One DEBUG line per batch with its outcome counts, before its offsets are committed.

        Metrics die with a SIGKILLed process; these lines stay in its log, so the fault suite can
        sum, across every process of a run, how many records were seen, applied, and absorbed as
        duplicates by the dedupe marker (``retried``: records left for a transient retry)."""
        log_event(
            log, logging.DEBUG, "batch finished",
            records=len(items),
            applied=sum(1 for r in results if r.applied),
            duplicates=sum(1 for r in results if r.duplicate),
            failed=sum(1 for i in items if _is_permanent(i)),
            retried=sum(1 for i in items if batch.covers(i.tp, i.offset)),
            partitions=",".join(f"{t}[{p}]" for t, p in sorted({i.tp for i in items})),
        )

    def _prepare(self, item: _Item) -> None:
        """Decode and route one record; any problem becomes the record's failure (#12.5)."""
        outcome = self.decoder(Origin.of(item.msg))
        if isinstance(outcome, Failure):
            item.failure = outcome
        else:
            item.event, item.route, item.ref = outcome

    def _account(self, items: list[_Item], results: list[ApplyResult], batch: Batch) -> None:
        now = datetime.now(timezone.utc)
        e2e = self.metrics.end_to_end_seconds.labels(self.config.group)
        for item, result in zip(items, results):
            metrics = self._topic_metrics(item.tp[0])
            if result.applied:
                batch.finished(item.tp, item.offset, Fate.APPLIED)
                metrics[1].inc()
                created = item.event.created_at if item.event else None
                if created is not None:
                    e2e.observe(max(0.0, (now - created).total_seconds()))
            elif result.duplicate:
                batch.finished(item.tp, item.offset, Fate.DUPLICATE)
                metrics[2].inc()
            elif result.retry:
                batch.hold(item.tp, item.offset, result.reason or "retry", result.error or "")
            else:
                result.raise_for_failure() if result.undo_error else None  # EffectEngineError: stop
                code = classes.CROSS_SLOT if result.cross_slot else classes.redis_error_code(result.error)
                where = f" at command {result.command_index} ({result.command})" if result.command_index is not None else ""
                item.failure = Failure(classes.effect_failed(code), f"effect failed{where}: {result.error}", item.attempts or 1, recorded=not result.cross_slot)
                item.fx = None

    def _dead_lettered(self, item: _Item) -> None:
        """Counted and logged once, when its dead letter is acknowledged: a record whose dead
        letter is retried (not acknowledged, or its partition blocked before it) is not counted
        again on the retry (#14.1)."""
        failure = item.failure
        assert failure is not None
        self._topic_metrics(item.tp[0])[3].inc()
        self.metrics.failures.labels(self.config.group, item.tp[0], failure.error_class, failure.kind).inc()
        with event_context(item.event) if item.event else nullcontext():
            self._log_dead_letter(item, failure)

    def _log_dead_letter(self, item: _Item, failure: Failure) -> None:
        log_event(log, logging.WARNING, "permanent failure: dead-lettered", error_class=failure.error_class, error=failure.error,
                  event_id=item.event.id if item.event else _header_id(item.msg), attempts=failure.attempts, **_where(item),
                  **({"exc_info": item.exc} if item.exc is not None else {}))  # fmt: skip

    def _pause(self, state: PartitionState, offset: int, reason: str, error: str) -> None:
        assert self.consumer is not None
        state.failures += 1
        delay = self.backoff.delay(state.failures)
        tp = TopicPartition(state.topic, state.partition)
        if state.resume_at is None:
            self.consumer.pause([tp])
        state.resume_at = time.monotonic() + delay
        state.resume_offset = offset
        state.last_error = error
        self.metrics.retries.labels(self.config.group, reason).inc()
        self.metrics.failures.labels(self.config.group, state.topic, classes.transient(reason), classes.TRANSIENT).inc()
        self._refresh_gauges()
        log_event(log, logging.WARNING, "transient failure: partition paused, will retry from its first unfinished record",
                  topic=state.topic, partition=state.partition, offset=offset, reason=reason, error=one_line(error, 300),
                  attempt=state.failures, retry_in_s=round(delay, 2))

    def _resume_due(self) -> None:
        now = time.monotonic()
        due = [s for s in self.states.values() if s.resume_at is not None and s.resume_at <= now]
        if not due:
            return
        assert self.consumer is not None
        for state in due:
            tp = TopicPartition(state.topic, state.partition, state.resume_offset if state.resume_offset is not None else OFFSET_INVALID)
            self.consumer.resume([TopicPartition(state.topic, state.partition)])
            if state.resume_offset is not None:
                try:
                    self.consumer.seek(tp)
                except KafkaException as exc:
                    # Not fetchable yet (e.g. just assigned): pause again briefly.
                    self.consumer.pause([TopicPartition(state.topic, state.partition)])
                    state.resume_at = now + self.backoff.base_s
                    log.debug("seek %s[%d]@%d failed (%s); retrying", state.topic, state.partition, state.resume_offset, exc)
                    continue
            state.resume_at = None
            log_event(log, logging.INFO, "partition resumed", topic=state.topic, partition=state.partition, offset=state.resume_offset, attempt=state.failures)
        self._refresh_gauges()

    def _poll_timeout(self) -> float:
        timeout = self.config.batch_wait_ms / 1000
        if self.states and all(s.paused for s in self.states.values()):
            soonest = min(s.resume_at for s in self.states.values())  # type: ignore[type-var]
            return max(0.0, min(0.5, soonest - time.monotonic()))
        return timeout

    # -- offsets -----------------------------------------------------------------------------------

    def _commit(self, *, sync: bool = False, only: Iterable[tuple[str, int]] | None = None) -> bool:
        """Commit what is finished: asynchronously in steady state (past what was sent);
        synchronously on revoke and shutdown (past what the broker confirmed). Returns False when
        a commit failed and is worth retrying (not a rebalance refusal: those are final)."""
        if self.consumer is None:
            return True
        states = [self.states[k] for k in (only if only is not None else list(self.states)) if k in self.states]
        offsets = [TopicPartition(s.topic, s.partition, o) for s in states if (o := s.to_commit(confirmed=sync)) is not None]
        if not offsets:
            return True
        try:
            if sync:
                self._commit_sync(offsets)
            else:
                self.consumer.commit(offsets=offsets, asynchronous=True)
                self._commit_outcome(offsets, confirmed=False)
        except KafkaException as exc:
            return self._commit_refused(exc, offsets)
        return True

    def _commit_sync(self, offsets: list[TopicPartition]) -> None:
        assert self.consumer is not None
        result = self.consumer.commit(offsets=offsets, asynchronous=False) or []
        bad = [tp for tp in result if tp.error is not None]
        if bad:
            raise KafkaException(bad[0].error)
        self.metrics.commits.labels(self.config.group, "ok").inc()
        self._commit_outcome(offsets, confirmed=True)

    def _commit_outcome(self, offsets: list[TopicPartition], *, confirmed: bool) -> None:
        for tp in offsets:
            state = self.states.get((tp.topic, tp.partition))
            if state is None or tp.offset < 0:
                continue
            if confirmed:
                state.commit_confirmed(tp.offset)
            else:
                state.commit_sent(tp.offset)

    def _commit_refused(self, exc: KafkaException, offsets: list[TopicPartition]) -> bool:
        error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        code = error.code() if error is not None else None
        if code == KafkaError._NO_OFFSET:
            return True
        if code in REBALANCE_COMMIT_ERRORS:
            self.metrics.commits.labels(self.config.group, "rebalance").inc()
            log_event(log, logging.WARNING, "offset commit refused during a rebalance; the next owner redelivers past the last commit and skips the duplicates",
                      error=str(exc), partitions=_show(offsets))
            return True
        self.metrics.commits.labels(self.config.group, "error").inc()
        log_event(log, logging.ERROR, "offset commit failed; will retry", error=str(exc), partitions=_show(offsets))
        return False

    def _final_commit(self) -> None:
        """Shutdown: commit synchronously everything applied that the broker has not confirmed
        (async commits in flight included), retrying a failed commit with backoff (#12.12)."""
        for attempt in range(1, FINAL_COMMIT_ATTEMPTS + 1):
            if self._commit(sync=True) and not pending(self.states.values()):
                return
            time.sleep(self.backoff.delay(attempt))
        left = pending(self.states.values())
        if left:
            log_event(log, logging.ERROR, "final offset commit failed; records after the last commit will be redelivered and skipped as duplicates",
                      partitions=",".join(f"{s.topic}[{s.partition}]@{s.done}" for s in left), attempts=FINAL_COMMIT_ATTEMPTS)

    # -- metrics helpers -----------------------------------------------------------------------------

    def _topic_metrics(self, topic: str) -> tuple[Any, Any, Any, Any]:
        found = self._m_topic.get(topic)
        if found is None:
            g, m = self.config.group, self.metrics
            found = self._m_topic[topic] = (
                m.consumed.labels(g, topic), m.applied.labels(g, topic), m.duplicates.labels(g, topic), m.dead_lettered.labels(g, topic)
            )
        return found

    def _refresh_gauges(self) -> None:
        g = self.config.group
        self.metrics.assigned.labels(g).set(len(self.states))
        self.metrics.paused.labels(g).set(sum(1 for s in self.states.values() if s.paused))

    def _update_lag(self) -> None:
        now = time.monotonic()
        if now < self._next_lag or self.consumer is None:
            return
        self._next_lag = now + LAG_INTERVAL_S
        for state in list(self.states.values()):
            try:
                _low, high = self.consumer.get_watermark_offsets(TopicPartition(state.topic, state.partition), cached=True)
            except KafkaException:
                continue
            if high is None or high < 0:
                continue
            position = state.done if state.done is not None else state.acked
            if position is None:
                continue
            self.metrics.lag.labels(self.config.group, state.topic, str(state.partition)).set(max(0, high - position))

    def _record_error(self, err: KafkaError) -> None:
        if err.code() in (KafkaError._PARTITION_EOF,):
            return
        if err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            log.debug("topic not there yet: %s", err)
            return
        if err.fatal() and not _is_fence(err, True):
            raise KafkaException(err)
        self._on_kafka_error(err)


# -- helpers ---------------------------------------------------------------------------------------


def _settle(item: _Item, outcome: Outcome) -> None:
    if isinstance(outcome, HandlerFailed):
        item.failure, item.exc = outcome.failure, outcome.exc
        item.attempts = outcome.failure.attempts
    else:
        item.fx = outcome


def _is_fence(err: KafkaError, fatal: bool) -> bool:
    """FENCED_INSTANCE_ID, or librdkafka's fatal error it turns into (its text names the fence)."""
    return err.code() == KafkaError.FENCED_INSTANCE_ID or (fatal and "fenced" in err.str().lower())


def _apply_result(result: ApplyResult) -> str:
    """``applied``, ``duplicate``, ``failed``, or ``retry`` (held back by a Redis Cluster node that is down)."""
    return result.outcome.value


def _show(partitions: Iterable[TopicPartition]) -> str:
    return ",".join(f"{tp.topic}[{tp.partition}]" + (f"@{tp.offset}" if tp.offset >= 0 else "") for tp in partitions)


def _is_permanent(item: _Item) -> bool:
    return item.failure is not None and item.failure.kind == classes.PERMANENT


def _block_transient(item: _Item, batch: Batch) -> None:
    if item.failure is not None and item.failure.kind == classes.TRANSIENT:
        batch.block(item.tp, item.offset, "handler", item.failure.error)


def _where(item: _Item) -> dict[str, Any]:
    return {"topic": item.tp[0], "partition": item.tp[1], "offset": item.offset}


def _header_id(msg: Message) -> str | None:
    for key, value in msg.headers() or []:
        if key == "id" and value:
            return EventHeaders.parse([(key, value)]).event_id
    return None


def run(app: App, config: ConsumerConfig | None = None, **kwargs: Any) -> int:
    """Run ``app`` until SIGTERM/SIGINT with ``config`` (default: ``ConsumerConfig.load(app=app)``)."""
    return ConsumerRuntime(app, config or ConsumerConfig.load(app=app), **kwargs).run()


__all__ = ["ConsumerRuntime", "PartitionState", "parse_created_at", "run"]  # parse_created_at: from decoding
