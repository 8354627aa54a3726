"""`postbox consume MODULE:APP`: run an app's handlers as one member of a consumer group.

Every flag has an environment variable of the same name (``--batch-size`` ↔ ``POSTBOX_BATCH_SIZE``);
flags win. Start several processes with the same ``--group`` to share the partitions.

``--from SPEC --until SPEC`` makes it a bounded window run instead (:mod:`postbox.consumer.window`):
the app's partitions are assigned explicitly and read from ``--from`` to ``--until`` (resolved once,
at start-up), applied through the group's markers, never committed; it exits when every partition
reached its end, printing one line per partition. ``--until`` needs ``--from`` (a window names both
ends; ``--from committed`` starts at the group's committed offsets). A window serves no metrics or
health endpoints unless ``--metrics-port`` is on its command line: ``POSTBOX_METRICS_PORT`` is the
live consumer's, whose port a window run beside it (its pod, its environment) must not try to take.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any, Optional

import typer

from postbox.cli.client_options import command_settings, export_local_stack_env, kafka_client_options


@kafka_client_options
def consume(
    ctx: typer.Context,
    app_spec: str = typer.Argument(..., metavar="MODULE:APP", help="e.g. consumers.billing:app (an App or a factory of one)"),
    group: Optional[str] = typer.Option(None, "--group", help="consumer group (POSTBOX_GROUP; default: the App's name)"),
    topics: Optional[str] = typer.Option(None, "--topics", help="comma-separated topics (POSTBOX_TOPICS; default: outbox.event.<aggregate> per handled aggregate)"),
    kafka_bootstrap: Optional[str] = typer.Option(None, "--kafka-bootstrap", help="POSTBOX_KAFKA_BOOTSTRAP"),
    redis_url: Optional[str] = typer.Option(None, "--redis-url", help="POSTBOX_REDIS_URL"),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="records per batch (POSTBOX_BATCH_SIZE, default 500)"),
    batch_wait_ms: Optional[int] = typer.Option(None, "--batch-wait-ms", help="longest wait to fill a batch (POSTBOX_BATCH_WAIT_MS, default 5)"),
    handler_retries: Optional[int] = typer.Option(None, "--handler-retries", help="in-place retries of a raising handler (POSTBOX_HANDLER_RETRIES, default 2)"),
    transient_retry_attempts: Optional[int] = typer.Option(None, "--transient-retry-attempts", help="dead-letter a record still failing transiently after this many attempts (POSTBOX_TRANSIENT_RETRY_ATTEMPTS, default 0: retried for ever)"),
    transient_retry_timeout: Optional[str] = typer.Option(None, "--transient-retry-timeout", help="dead-letter a record still failing transiently this long after its first failure, e.g. 1h (POSTBOX_TRANSIENT_RETRY_TIMEOUT, default: for ever)"),
    backoff_base_ms: Optional[int] = typer.Option(None, "--backoff-base-ms", help="first transient-retry delay (POSTBOX_BACKOFF_BASE_MS, default 200)"),
    backoff_max_ms: Optional[int] = typer.Option(None, "--backoff-max-ms", help="longest transient-retry delay (POSTBOX_BACKOFF_MAX_MS, default 30000)"),
    marker_ttl: Optional[str] = typer.Option(None, "--marker-ttl", help="dedupe marker lifetime, e.g. 8d (POSTBOX_MARKER_TTL)"),
    metrics_port: Optional[int] = typer.Option(None, "--metrics-port", help="Prometheus port, 0 = off (POSTBOX_METRICS_PORT)"),
    metrics_host: Optional[str] = typer.Option(None, "--metrics-host", help="Prometheus bind address (POSTBOX_METRICS_HOST, default 127.0.0.1)"),
    log_format: Optional[str] = typer.Option(None, "--log-format", help="text or json (POSTBOX_LOG_FORMAT)"),
    log_level: Optional[str] = typer.Option(None, "--log-level", help="DEBUG, INFO, WARNING, ERROR (POSTBOX_LOG_LEVEL)"),
    log_stderr: Optional[str] = typer.Option(None, "--log-stderr", help="auto: postbox's stderr handler unless the app installed root handlers; always; never (POSTBOX_LOG_STDERR)"),
    require_durable: Optional[str] = typer.Option(None, "--require-durable", help="true/false: refuse to commit unless Redis is durable (POSTBOX_REQUIRE_DURABLE, default true)"),
    redis_replicas: Optional[str] = typer.Option(None, "--redis-replicas", help="replicas each apply must reach before its offsets are committed: N, or auto = 1 when the primary has a connected replica, else 0 (POSTBOX_REDIS_REPLICAS, default auto)"),
    auto_offset_reset: Optional[str] = typer.Option(None, "--auto-offset-reset", help="earliest or latest, for a group without offsets (POSTBOX_AUTO_OFFSET_RESET)"),
    session_timeout_ms: Optional[int] = typer.Option(None, "--session-timeout-ms", help="Kafka session timeout (POSTBOX_SESSION_TIMEOUT_MS, default 45000)"),
    max_poll_interval_ms: Optional[int] = typer.Option(None, "--max-poll-interval-ms", help="POSTBOX_MAX_POLL_INTERVAL_MS, default 300000"),
    schemas_dir: Optional[str] = typer.Option(None, "--schemas-dir", help="event schemas folder (POSTBOX_SCHEMAS_DIR; default: the App's, else ./schemas)"),
    client_id: Optional[str] = typer.Option(None, "--client-id", help="Kafka client id (POSTBOX_CLIENT_ID)"),
    instance_id: Optional[str] = typer.Option(None, "--instance-id", help="static group member name (POSTBOX_INSTANCE_ID; default/'auto': <host>-<group>-<index>, unique per host; 'none': a dynamic member)"),
    workers: Optional[str] = typer.Option(None, "--workers", help="group members to run under one supervisor (POSTBOX_WORKERS, default 1; 'auto': one per core). "
                                          "Worker i serves --metrics-port PORT+i (one endpoint per worker) under its own instance id (NAME-i, or a per-host default). "
                                          "The supervisor forwards SIGTERM/SIGINT and restarts a crashed worker with backoff; "
                                          "a worker exiting 2 or 3, or failing at start 3 times in a row, stops them all with its exit code"),
    check: bool = typer.Option(False, "--check", help="load the app and validate the configuration, print it, and exit"),
    start: Optional[str] = typer.Option(None, "--from", help="with --until: a bounded window run from here — beginning | committed (the group's offsets) | last:N (the last N of EACH partition before --until) | OFFSET | ISO time | duration ago (2h)"),
    until: Optional[str] = typer.Option(None, "--until", help="end of the window (exclusive): OFFSET | ISO time | duration ago | end (the high watermark at start-up), as kcat -o e@ts; never commits the group's offsets"),
    partition: Optional[list[int]] = typer.Option(None, "--partition", "-p", min=0, metavar="PARTITION", help="with --until: only this partition (repeatable: -p 0 -p 3)"),
    force: bool = typer.Option(False, "--force", help="with --until: run a window that starts ahead of its group's committed offsets (the group would apply the records before the window's start after it: an aggregate's events out of order); logged as a warning"),
) -> int:
    """Consume outbox topics with the handlers of MODULE:APP, exactly once per group."""
    from postbox.consumer import ConsumerConfig, ConsumerRuntime, load_app
    from postbox.consumer.instance import DYNAMIC
    from postbox.consumer.logs import configure

    window = _window_specs(start, until, partition, instance_id)  # usage errors first (exit 2)
    count = _worker_count(workers, window)
    settings = command_settings(kafka_bootstrap=kafka_bootstrap, redis_url=redis_url)
    export_local_stack_env()  # handlers and the durability check read the environment themselves
    app = load_app(app_spec)
    config = ConsumerConfig.load(
        app=app, settings=settings,
        group=group, topics=topics, kafka_bootstrap=kafka_bootstrap, redis_url=redis_url,
        batch_size=batch_size, batch_wait_ms=batch_wait_ms, handler_retries=handler_retries,
        transient_retry_attempts=transient_retry_attempts, transient_retry_timeout=transient_retry_timeout,
        backoff_base_ms=backoff_base_ms, backoff_max_ms=backoff_max_ms, marker_ttl=marker_ttl,
        metrics_port=metrics_port if window is None else metrics_port or 0,  # a window: only its own flag (module docs)
        metrics_host=metrics_host, log_format=log_format, log_level=log_level, log_stderr=log_stderr,
        require_durable=require_durable, redis_replicas=redis_replicas, auto_offset_reset=auto_offset_reset,
        session_timeout_ms=session_timeout_ms, max_poll_interval_ms=max_poll_interval_ms,
        schemas_dir=schemas_dir, client_id=client_id, instance_id=instance_id,
    )  # fmt: skip
    if count > 1 and not check:
        from postbox.cli.consume_workers import run_workers
        from postbox.consumer.reader_schemas import load_reader_codec

        load_reader_codec(app, config)  # a missing schema: one error here, not N workers failing at start
        configure(config.log_format, config.log_level, config.log_stderr)
        return run_workers(ctx, app, config, count)
    config = config.with_default_instance(app.name) if window is None else replace(config, instance_id=DYNAMIC)
    if check:
        from postbox.cli.output import print_json  # here: rich is not imported by a consumer that runs (start-up time is recovery time)
        from postbox.consumer.reader_schemas import load_reader_codec

        load_reader_codec(app, config)  # a handler's missing schema is a configuration error here too
        print_json({"app": app_spec, "handlers": [f"{r.aggregate_type}/{r.event_type} -> {r.name}" for r in app.routes],
                    "hooks": {"startup": list(app.lifecycle.provided), "shutdown": [h.name for h in app.lifecycle.shutdown]},
                    "config": config.describe(), "sources": dict(config.sources), "window": window_check(window),
                    "workers": count})  # fmt: skip
        return 0
    configure(config.log_format, config.log_level, config.log_stderr)
    if window is not None:
        return run_window(app, config, settings, *window, force=force)
    return run_member(ConsumerRuntime(app, config))


def _worker_count(workers: Optional[str], window: Optional[tuple[Any, Any, Optional[list[int]]]]) -> int:
    """How many workers ``--workers`` asks for; a window run is one process (usage error otherwise)."""
    if workers is None and window is not None:
        return 1  # POSTBOX_WORKERS is the live group's, not a window's (as POSTBOX_METRICS_PORT)
    from postbox.cli.consume_workers import worker_count

    count = worker_count(workers)
    if count > 1 and window is not None:
        raise typer.BadParameter("a window run is one process: it takes no --workers", param_hint="--workers")
    return count


def run_member(runtime: Any) -> int:
    """Run one group member; a worker of a supervisor also stops when its supervisor is gone
    (:mod:`postbox.consumer.supervised`) and names its slot in every log line."""
    from postbox.consumer.logs import log_context
    from postbox.consumer.supervised import WORKER_INDEX_ENV, supervisor_pid, watch_supervisor

    parent = supervisor_pid()
    if parent is None:
        return int(runtime.run())
    watch_supervisor(parent, runtime.stop)
    with log_context(worker=os.environ.get(WORKER_INDEX_ENV)):
        return int(runtime.run())


def _window_specs(start: Optional[str], until: Optional[str], partition: Optional[list[int]],
                  instance_id: Optional[str]) -> Optional[tuple[Any, Any, Optional[list[int]]]]:  # fmt: skip
    """``(start, end, partitions)`` of a window run, None for a group member; usage errors name the flag."""
    if until is None:
        if start is not None:
            raise typer.BadParameter("--from needs --until: a window run names both ends (to move where the group resumes, use `postbox replay`)",
                                     param_hint="--from")
        if partition:
            raise typer.BadParameter("--partition selects a window's partitions: it needs --from and --until", param_hint="--partition")
        return None
    if start is None:
        raise typer.BadParameter("--until needs --from (e.g. --from committed for the group's committed offsets, or --from 2h)", param_hint="--until")
    from postbox.consumer.instance import AUTO, DYNAMIC

    if instance_id not in (None, DYNAMIC, AUTO):
        raise typer.BadParameter("a window run joins no group, so it takes no --instance-id", param_hint="--instance-id")
    from postbox.incident.window import check_order, parse_window_end, parse_window_start  # a group member does not import it (start-up time)

    try:
        begin, end = parse_window_start(start), parse_window_end(until)
        check_order(begin, end)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--until") from None
    return begin, end, sorted(set(partition)) if partition else None


def window_check(window: Optional[tuple[Any, Any, Optional[list[int]]]]) -> Optional[dict[str, Any]]:
    """What ``--check`` says of the window a run would apply (None: a group member). Its ends as
    parsed (a duration ago is already a time), not yet resolved to offsets: that needs Kafka."""
    if window is None:
        return None
    start, end, partitions = window
    return {"from": start.describe(), "until": f"{end.describe()} (exclusive)",
            "partitions": partitions if partitions else "all",
            "commits": "never: a window run joins no group and leaves its offsets as they are"}


def run_window(app: Any, config: Any, settings: Any, start: Any, end: Any, partitions: Optional[list[int]], *, force: bool = False) -> int:
    """Resolve the window on the app's topics, run it, print one line per partition. Exit 0 when
    every partition reached its end, :data:`~postbox.consumer.window.EXIT_WINDOW_INCOMPLETE` when it
    was stopped before, 3 on an engine or configuration error while running. A window that starts
    ahead of its group (:mod:`postbox.incident.window_order`) is refused without ``force``, and
    logged as a warning with it; an old window is only warned about."""
    from postbox.cli.incident_common import kafka_for
    from postbox.incident.dlq import DEFAULT_SAFETY_MARGIN  # warned about as `replay --safety-margin` refuses
    from postbox.incident.window import COMMITTED, check_group_position, check_marker_window, plan_window
    from postbox.incident.window_order import refuse_or_warn

    config = with_group_marker_ttl(config)
    with kafka_for(settings) as kafka:
        for topic in config.topics:
            kafka.require_topic(topic)
        committed = kafka.committed(config.group) if start.kind == COMMITTED else None
        plan = plan_window(kafka, list(config.topics), start, end, partitions=partitions, committed=committed)
        ahead = check_group_position(kafka, plan, config.group, offset_reset=config.auto_offset_reset)
        check_marker_window(kafka, plan, config.marker_ttl, DEFAULT_SAFETY_MARGIN)
    print_window_plan(config.group, plan)
    refuse_or_warn(config.group, ahead, members=plan.members, force=force)
    code, summary = execute_window(app, config, plan)
    for tally, reached in summary:
        typer.echo(tally.line(reached))
    return code


def load_window_app(app_spec: str, group: str, topics: list[str], fallback: list[str], settings: Any) -> tuple[Any, Any]:
    """The app and the configuration of a window run for ``group`` (``replay --until --execute``):
    flags and ``POSTBOX_*`` as ``consume`` reads them, never a static member. Topics: ``topics``,
    else the app's (or ``POSTBOX_TOPICS``), else ``fallback`` (the group's committed topics: a
    catch-all app names none)."""
    import os

    from postbox.consumer import ConsumerConfig, load_app
    from postbox.consumer.instance import DYNAMIC
    from postbox.consumer.logs import configure

    export_local_stack_env()
    app = load_app(app_spec)
    chosen = topics or ([] if app.topics() or os.environ.get("POSTBOX_TOPICS") else fallback)
    config = ConsumerConfig.load(app=app, settings=settings, group=group, topics=",".join(chosen) or None, instance_id=DYNAMIC,
                                metrics_port=0)  # no endpoints: the live consumer beside it may hold the port
    configure(config.log_format, config.log_level, config.log_stderr)
    return app, with_group_marker_ttl(config)


def with_group_marker_ttl(config: Any) -> Any:
    """``config`` with the marker TTL the live group published (``postbox.effects.groups``) when
    neither ``--marker-ttl`` nor ``POSTBOX_MARKER_TTL`` set one. Why: a window writes markers *for
    the group*; with the default TTL (8 days) instead of the group's (say 14, for 14 days of topic
    retention), events it applied could be applied again once their markers expired, and the
    engine would publish the shorter TTL as the group's (doctor would check the wrong bound)."""
    if config.source("marker_ttl") != "default":
        return config
    from postbox.incident.redis_state import published_marker_ttl

    published = published_marker_ttl(config.redis_url, config.group)  # None: the run's start-up says what Redis lacks
    if published is None:
        return config
    return replace(config, marker_ttl=published, sources={**config.sources, "marker_ttl": "the group's published TTL"})


def print_window_plan(group: str, plan: Any) -> None:
    """What the window resolved to, on stderr: its size, each adjustment, each warning."""
    from postbox.cli.output import err_console

    err_console.print(f"window of group {group} {plan.describe()}: {plan.records:,} record(s) on {len(plan.rows)} partition(s)",
                      highlight=False, markup=False)  # fmt: skip
    for row in plan.rows:
        for note in row.notes:
            err_console.print(f"note: {row.span.topic}[{row.span.partition}]: {note}", highlight=False, markup=False)
    for problem in plan.problems:
        err_console.print(f"warning: {problem}", highlight=False, markup=False)


def execute_window(app: Any, config: Any, plan: Any) -> tuple[int, list[Any]]:
    """Run the resolved window ``plan`` through the runtime; ``(exit code, [(tally, reached)])``.
    The code is :data:`~postbox.consumer.window.EXIT_WINDOW_INCOMPLETE` when the run stopped
    cleanly (a signal) before every partition reached its end."""
    from postbox.consumer import ConsumerRuntime
    from postbox.consumer.window import EXIT_WINDOW_INCOMPLETE, WindowAssignment

    window = WindowAssignment(plan.spans)
    code = ConsumerRuntime(app, config, assignment=window).run()
    summary = window.summary()
    if code == 0 and not all(reached for _, reached in summary):
        code = EXIT_WINDOW_INCOMPLETE
    return code, summary


def register(app: typer.Typer) -> None:
    app.command("consume", no_args_is_help=True)(consume)
