"""The consumer: its lifecycle and its loop. One thread reads, one worker thread applies.

Start-up: schemas, Redis (the engine's script, durability), the metrics endpoint, the dead-letter
producer, the Kafka consumer (cooperative-sticky, manual offsets). Then, until stopped::

    resume the partitions whose backoff is over            partitions.Partitions.resume_due
    read a batch                                           consume(batch_size)
    decode it and run its handlers                         pipeline.Pipeline.prepare
    settle the batch whose apply is in flight              pipeline.Pipeline.settle
    dead-letter what failed, hand the rest to the worker   pipeline.Pipeline.launch
    commit what is finished                                partitions.Partitions.commit

so batch N+1 is decoded and handled while Redis applies batch N (see
:mod:`postbox.consumer.pipeline` for the steps and why order and commits stay safe, and
:mod:`postbox.consumer.partitions` for pause/resume/seek, commits and rebalances). Shutdown (stop(),
SIGTERM/SIGINT): the batch in flight is settled, everything finished is committed synchronously,
the group is left. Exit codes: 0 a clean stop; 3 an engine or configuration error found while
running (nothing of the failing batch committed); a configuration error at start-up is raised.

Transient failures (Redis refused or unreachable, durability not confirmed, DLQ produce not
acknowledged, a handler's dependency down) stop the affected partitions at their first unfinished
record: nothing at or after it is committed, the partition is paused and, after an exponential
backoff with jitter, resumed and sought back to that record. Other partitions keep flowing.
Re-applying is safe: events whose effects already landed come back as duplicates.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import signal
import threading
import time
from typing import Any

import redis
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from postbox import kafka_config
from postbox.codec import AvroCodec
from postbox.consumer import health, testhooks, tracing
from postbox.consumer.app import App
from postbox.consumer.assignment import Assignment, GroupMembership
from postbox.consumer.backoff import Backoff
from postbox.consumer.config import ConsumerConfig
from postbox.consumer.decoding import Decoder, parse_created_at
from postbox.consumer.deadletter import DeadLetters
from postbox.consumer.fencing import FenceAction, FencePolicy, is_fence
from postbox.consumer.gc_tuning import tuned_collector
from postbox.consumer.instance import instance_fenced
from postbox.consumer.invoke import Invoker
from postbox.consumer.logs import log_context, log_event
from postbox.consumer.metrics import Metrics
from postbox.consumer.observation import Observer
from postbox.consumer.partition_state import PartitionState
from postbox.consumer.pipeline import Pipeline
from postbox.consumer.switch_interval import short_switch_interval
from postbox.errors import ConfigError, EffectEngineError, TransientEffectError
from postbox.effects import EffectsEngine
from postbox.events import Event
from postbox.failure_classes import redis_error_code as _error_code  # noqa: F401 - its old name here, kept for importers
from postbox.redis_client import check_not_cluster_node
from postbox.redis_client import connect as connect_redis
from postbox.settings import redact_url

log = logging.getLogger("postbox.consumer")

#: Longest wait for the revoke of an orderly stop before closing (static members, see _leave_group).
LEAVE_WAIT_S = 10.0
#: How long a fenced member asks Kafka which broker coordinates its group (see :mod:`postbox.consumer.fencing`).
COORDINATOR_LOOKUP_S = 5.0

#: Held records (Redis Cluster node down) a partition may carry, in batches: past it, it pauses.
HELD_PER_BATCH = 4

EXIT_OK = 0
EXIT_ENGINE_ERROR = 3


class Stopped(Exception):
    """Raised inside start-up waits when a stop was requested."""


class ConsumerRuntime:
    """Runs an :class:`App` against Kafka and Redis with ``config``. See the module docs.

    ``redis_client``: a ``redis.Redis``/``RedisCluster`` with bytes replies (default: from
    ``config.redis_url``). ``install_signals``: handle SIGTERM/SIGINT (main thread only) by
    finishing the batch, committing and leaving the group; otherwise call :meth:`stop`.
    ``kafka_overrides``: extra librdkafka consumer properties. ``assignment``: where the partitions
    come from (default: membership of ``config.group``; :mod:`postbox.consumer.window` for a bounded
    window run, see :mod:`postbox.consumer.assignment`). ``observer``: called with the records of
    each settled batch, their timings and outcomes (:mod:`postbox.consumer.observation`).
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
        assignment: Assignment | None = None,
        observer: Observer | None = None,
    ) -> None:
        self.app = app
        self.config = config
        self.metrics = metrics or Metrics(config.group)
        self.install_signals = install_signals
        self.kafka_overrides = dict(kafka_overrides or {})
        self.assignment = assignment or GroupMembership()
        self.redis = redis_client or connect_redis(
            config.redis_url, socket_timeout=10, socket_connect_timeout=5, health_check_interval=30
        )
        engine = EffectsEngine(self.redis, config.group, marker_ttl=config.marker_ttl, legacy_markers=config.legacy_markers,
                               replicas=config.redis_replicas)
        self.backoff = Backoff(config.backoff_base_ms / 1000, config.backoff_max_ms / 1000)
        self.client_id = config.client_id or f"postbox-{config.group}-{os.getpid()}"
        self.consumer: Consumer | None = None
        self.codec: AvroCodec | None = None
        self._stop = threading.Event()
        #: Runs handlers; its event loop (async handlers; made on first use) is closed at shutdown.
        self.invoker = Invoker(config.handler_retries, self.backoff, asyncio.Runner(), self._handler_retry, group=config.group)
        self.partitions = self.assignment.partitions(config.group, self.metrics, self.backoff)
        #: The decoder is replaced by one with the schema codec once it is loaded at start-up.
        self.pipeline = Pipeline(group=config.group, engine=engine, invoker=self.invoker, partitions=self.partitions,
                                 metrics=self.metrics, decoder=Decoder(app, None), require_durable=config.require_durable,
                                 on_kafka_error=self._on_kafka_error, held_limit=HELD_PER_BATCH * config.batch_size,
                                 carry_delay_s=self.backoff.base_s, observer=observer,
                                 retry_budget=config.retry_budget)  # fmt: skip
        self.partitions.settle = self._settle_for_handover
        self._last_kafka_error = ("", 0.0)
        #: Set when librdkafka reports a refused login or TLS handshake, or that another process
        #: uses this instance id (fenced): the consumer stops on a configuration error.
        self._config_failure: ConfigError | None = None
        #: Set when the broker fenced this static member and it is to rejoin with a new client
        #: (:mod:`postbox.consumer.fencing`); the loop does it between batches.
        self._rejoin: str | None = None
        self._fences = FencePolicy()
        #: /healthz: when the loop last turned; stale past max.poll.interval.ms (Kafka's own limit).
        self.liveness = health.Liveness(config.max_poll_interval_ms / 1000)
        self.http: health.HealthServer | None = None
        #: Set once the consumer has subscribed and tuned the process (tests and the bench wait on it).
        self.ready = threading.Event()

    @property
    def engine(self) -> EffectsEngine:
        """The effects engine the apply worker uses (replaceable before :meth:`run`, as tests do)."""
        return self.pipeline.engine

    @engine.setter
    def engine(self, engine: EffectsEngine) -> None:
        self.pipeline.engine = engine

    @property
    def states(self) -> dict[tuple[str, int], PartitionState]:
        """The assigned partitions' states (:class:`~postbox.consumer.partitions.Partitions`)."""
        return self.partitions.states

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
        tracing.refresh()  # the app's tracer provider, if it configures one, is set by now
        self.codec = self._load_codec()
        self.pipeline.decoder = Decoder(self.app, self.codec)
        if cfg.metrics_port:
            self._serve_http()
        self._wait_for_redis()
        self.pipeline.dead_letters = DeadLetters(cfg.kafka_bootstrap, cfg.group, client_id=self.client_id + "-dlq",
                                                 properties=cfg.kafka_properties)  # fmt: skip
        self.consumer = self.partitions.consumer = self._open_consumer()
        code = EXIT_OK
        try:
            self._subscribe()
            with tuned_collector(), short_switch_interval():  # process-wide, while the loop runs
                self.ready.set()
                self._loop()
        except (EffectEngineError, ConfigError) as exc:  # e.g. an ACL refusal, Redis credentials revoked
            kind = "configuration error" if isinstance(exc, ConfigError) else "effects engine error"
            log_event(log, logging.ERROR, f"{kind}: stopping without committing the batch", error=str(exc))
            code = EXIT_ENGINE_ERROR
        finally:
            self._shutdown(commit=code == EXIT_OK and self._config_failure is None)
        return self._after_config_failure(code)

    def _loop(self) -> None:
        """Until stopped: read and prepare batch N+1 while batch N applies (module docs)."""
        batch_wait_s = self.config.batch_wait_ms / 1000
        while not self._stop.is_set() and not self.assignment.finished():
            self.liveness.beat()  # /healthz: the loop turns
            if self._rejoin is not None:
                self._rejoin_group()
            assert self.consumer is not None
            self.partitions.resume_due()
            messages = self.consumer.consume(self.config.batch_size, self.partitions.poll_timeout(batch_wait_s))
            prepared = self.pipeline.prepare(messages) if messages else None
            if self.pipeline.settle():
                testhooks.hold_before_commit()  # after an apply was acknowledged, before its commit
            if prepared is not None or self.pipeline.carried_due():
                self.pipeline.launch(prepared)
            self.partitions.commit()
            self.partitions.update_lag()

    def _subscribe(self) -> None:
        assert self.consumer is not None
        self.assignment.start(self.consumer, list(self.config.topics), self.partitions)

    def _rejoin_group(self) -> None:
        """Replace the fenced Kafka client with a new one under the same instance id (see
        :mod:`postbox.consumer.fencing`). Its partitions are dropped like lost ones: nothing more is
        committed for them by the old client, and the new member resumes from the committed offsets
        (records applied since come back as duplicates)."""
        assert self.consumer is not None
        old, self.consumer, detail, self._rejoin = self.consumer, None, self._rejoin, None
        self.pipeline.settle()  # the apply in flight, before its partitions are dropped
        self.partitions.drop_all()
        try:
            old.close()
        except (KafkaException, RuntimeError) as exc:
            log.warning("closing the fenced Kafka client: %s", exc)
        log_event(log, logging.WARNING, "fenced by the broker: rejoining with a new client under the same instance id",
                  instance_id=self.config.static_instance_id, error=detail)  # fmt: skip
        self.consumer = self.partitions.consumer = self._open_consumer()
        self._subscribe()

    def _fenced(self, detail: str) -> None:
        """The broker fenced this static member: rejoin once, stop if it happens again soon."""
        if self._rejoin is not None or self._config_failure is not None:
            return  # the same fence reported again (librdkafka's error and its fatal error)
        if self._fences.on_fence(time.monotonic(), self._group_coordinator()) is FenceAction.REJOIN:
            self._rejoin = detail
            return
        self._config_failure = instance_fenced(self.config.instance_id, detail)
        log_event(log, logging.ERROR, "fenced again by another member with this instance id: stopping (a configuration error)",
                  error=self._config_failure.message, fix=self._config_failure.fix)  # fmt: skip
        self._stop.set()

    def _serve_http(self) -> None:
        """``/metrics``, ``/healthz``, ``/readyz`` on ``metrics_host:metrics_port`` (:mod:`postbox.consumer.health`)."""
        cfg = self.config
        ready = health.Probe({
            "consumer": health.membership_check(self.ready.is_set, self._stop.is_set, lambda: len(self.states)),
            "redis": health.redis_check(self.redis),
            "kafka": health.kafka_check(self._open_probe_admin),
            "durability": health.durability_check(self.engine, cfg.require_durable),
        })  # fmt: skip
        live = health.Probe({"loop": self.liveness.check})
        self.http = health.HealthServer(cfg.metrics_host, cfg.metrics_port, self.metrics.registry, live, ready).start()
        base = f"http://{cfg.metrics_host}:{cfg.metrics_port}"
        log_event(log, logging.INFO, "metrics and health endpoints up", metrics=f"{base}/metrics", healthz=f"{base}/healthz", readyz=f"{base}/readyz")

    def _group_coordinator(self) -> int | None:
        """The broker id of the group's coordinator now (None when Kafka does not say within a few
        seconds): a fence by another coordinator than the last one is explained by its move."""
        try:
            futures = self._open_probe_admin().describe_consumer_groups([self.config.group], request_timeout=COORDINATOR_LOOKUP_S)
            return int(futures[self.config.group].result(timeout=COORDINATOR_LOOKUP_S + 1).coordinator.id)
        except (KafkaException, RuntimeError, ValueError, AttributeError, concurrent.futures.TimeoutError) as exc:
            log.warning("cannot tell which broker coordinates group %s: %s", self.config.group, exc)
            return None

    def _open_probe_admin(self) -> AdminClient:
        """The readiness probe's Kafka client (its errors are the probe's answer, not log lines)."""
        conf = kafka_config.build(self.config.kafka_bootstrap, self.config.kafka_properties,
                                  kafka_config.admin_role(self.client_id + "-health"), error_cb=lambda _err: None)  # fmt: skip
        return kafka_config.open_client(AdminClient, conf, self.config.kafka_properties)

    def _settle_for_handover(self) -> None:
        """Before a revoke or loss: the apply in flight is settled, so what it applied is committed
        with the revoked partitions (nothing applied is left uncommitted by this member)."""
        self.pipeline.settle()

    def _handler_retry(self, name: str, event: Event, exc: BaseException, attempt: int) -> None:
        self.metrics.handler_retries.labels(self.config.group).inc()
        log_event(log, logging.WARNING, "handler raised; retrying in place", handler=name, error=f"{type(exc).__name__}: {exc}",
                  attempt=attempt, topic=event.topic, partition=event.partition, offset=event.offset)

    def _after_config_failure(self, code: int) -> int:
        """A refused Kafka login or a fenced instance id is a configuration error: at start-up (no
        partition was ever assigned) it is raised for the CLI to print with its fix (exit 1);
        later it is exit 3."""
        if self._config_failure is None:
            return code
        if not self.partitions.assigned_once:
            raise self._config_failure
        return EXIT_ENGINE_ERROR

    def _shutdown(self, *, commit: bool) -> None:
        if self.consumer is not None:
            if commit and self._settled_for_shutdown():
                self.partitions.final_commit()
            self.pipeline.close()  # stopping on an error: nothing of the batch in flight is committed
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
        self.pipeline.close()
        if self.pipeline.dead_letters is not None:
            self.pipeline.dead_letters.close()
        self.invoker.runner.close()
        if self.http is not None:
            self.http.close()
            self.http = None
        log_event(log, logging.INFO, "consumer stopped", group=self.config.group)

    def _settled_for_shutdown(self) -> bool:
        """Settle the apply in flight (its records are committed with the rest); False when it
        failed with an engine or configuration error (then nothing more is committed)."""
        try:
            self.pipeline.settle()
        except (EffectEngineError, ConfigError) as exc:
            log_event(log, logging.ERROR, "the last batch's apply failed: stopping without committing it", error=str(exc))
            return False
        return True

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
            log_event(log, logging.INFO, f"signal received: {self.assignment.on_signal}", signal=signal.Signals(signum).name)
            self._stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, handler)
        return previous

    def _open_consumer(self) -> Consumer:
        """The Kafka consumer, configured and made by the assignment strategy."""
        return kafka_config.open_client(self.assignment.client, self.assignment.configure(self._kafka_config()), self.config.kafka_properties)

    def _kafka_config(self) -> dict[str, Any]:
        """The group consumer's librdkafka configuration (:mod:`postbox.kafka_config` owns it)."""
        conf, _ = self.config.kafka_client_configs(self.client_id)
        return {**conf, "on_commit": self.partitions.on_commit, "error_cb": self._on_kafka_error, **self.kafka_overrides}

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
            log_event(log, logging.INFO, "Redis effects are durable", method=durability.method, replicas=durability.replicas,
                      replicas_on_disk=durability.replicas_fsync)

    def _on_kafka_error(self, err: KafkaError) -> None:
        if kafka_config.is_login_failure(err.name(), err.str()):
            self._config_failure = kafka_config.login_error(self.config.kafka_bootstrap, self.config.kafka_properties, err.str())
            log_event(log, logging.ERROR, "Kafka refused the login: stopping (a configuration error)", error=self._config_failure.message)
            self._stop.set()
            return
        # librdkafka reports its fatal errors to error_cb as code _FATAL, with fatal() False.
        fatal = err.fatal() or err.code() == KafkaError._FATAL
        if is_fence(err, fatal):
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



def run(app: App, config: ConsumerConfig | None = None, **kwargs: Any) -> int:
    """Run ``app`` until SIGTERM/SIGINT with ``config`` (default: ``ConsumerConfig.load(app=app)``)."""
    return ConsumerRuntime(app, config or ConsumerConfig.load(app=app), **kwargs).run()


__all__ = ["ConsumerRuntime", "PartitionState", "parse_created_at", "run"]  # parse_created_at: from decoding
