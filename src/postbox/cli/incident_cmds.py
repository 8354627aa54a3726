"""Incident commands: topics, tail, trace, lag, dlq, replay, connector, doctor, audit.

Every command prints a rich table by default and a stable JSON document with ``--json``; exit
codes: 0 ok, 1 a problem was found or an expected failure happened (one line + fix, no
traceback), 2 usage error. Commands are read-only unless their purpose is to change something
(``dlq replay --execute``, ``replay``, ``connector restart|apply``); those ask for confirmation
unless ``--yes`` and append an audit record (``postbox audit``). See docs/incident.md.
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterator, Optional

import typer
from rich.markup import escape
from rich.table import Table

from postbox.cli.client_options import command_settings, kafka_client_options
from postbox.cli.output import console, err_console, print_json
from postbox.errors import AuditError, PostboxError, UnsafeReplayError
from postbox.slot import describe as describe_slot
from postbox.settings import Settings

# -- shared options -------------------------------------------------------------------------------
JsonOpt = typer.Option(False, "--json", help="Print one JSON document (stable shape) instead of tables.")
KafkaOpt = typer.Option(None, "--kafka-bootstrap", help="Kafka bootstrap servers (env POSTBOX_KAFKA_BOOTSTRAP).")
RedisOpt = typer.Option(None, "--redis-url", help="Redis URL (env POSTBOX_REDIS_URL).")
ConnectOpt = typer.Option(None, "--connect-url", help="Kafka Connect URL (env POSTBOX_CONNECT_URL).")
DbOpt = typer.Option(None, "--database-url", help="PostgreSQL URL (env POSTBOX_DATABASE_URL).")
TtlOpt = typer.Option(None, "--marker-ttl", help="Dedupe marker TTL the groups use (env POSTBOX_MARKER_TTL; default 8d).")
YesOpt = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation.")

dlq_app = typer.Typer(help="Dead letters: list, show, replay to the origin topic (dry run by default).", no_args_is_help=True)
connector_app = typer.Typer(help="The Debezium connector on Kafka Connect: status, restart, apply.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.command("topics", help="Outbox topics and their DLQs: partitions, earliest/latest offsets, messages, retention.")(topics)
    app.command("tail", help="Decoded records of a topic: start anywhere, filter, --follow.")(tail)
    app.command("trace", help="One event's whole path: outbox row, Kafka record, each group's verdict.")(trace)
    app.command("lag", help="Per group and partition: committed, end, lag, oldest unconsumed; slot and connector.")(lag)
    app.add_typer(dlq_app, name="dlq")
    app.command("replay", help="Reset a stopped group's offsets to earliest, an offset or a time (re-consume).")(replay)
    app.add_typer(connector_app, name="connector")
    app.command("doctor", help="Check every precondition of the pipeline; one line per check with the fix.")(doctor)
    app.command("audit", help="What was changed during incidents: who, when, what, how many.")(audit)


def _settings(**overrides: Optional[str]) -> Settings:
    return command_settings(**overrides)


@contextmanager
def _kafka(settings: Settings) -> Iterator[Any]:
    from postbox.incident.kafka import Kafka

    kafka = Kafka(settings.kafka_bootstrap, properties=settings.kafka_properties)
    try:
        yield kafka
    finally:
        kafka.close()


def _progress(label: str) -> Any:
    from postbox.incident.progress import Progress

    return Progress(label)


def _confirm(question: str, yes: bool) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        raise PostboxError(f"{question} — refusing without confirmation (stdin is not a terminal)", fix="pass --yes to confirm")
    if not typer.confirm(question, default=False, err=True):
        err_console.print("nothing changed")
        raise typer.Exit(1)


def _ttl(flag: Optional[str]) -> timedelta:
    from postbox.incident.redis_state import marker_ttl

    return marker_ttl(flag)


def _duration(text: Optional[str], option: str) -> Optional[timedelta]:
    if not text:
        return None
    from postbox.incident.redis_state import parse_duration

    try:
        return parse_duration(text, option)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None


def _event_id(text: str, option: str = "EVENT_ID") -> str:
    from postbox.incident.trace import parse_event_id

    try:
        return parse_event_id(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None


def _audit(kafka: Any, command: str, target: str, count: int, outcome: str, details: dict[str, Any]) -> dict[str, Any] | None:
    """Append an audit record; on failure print it (so it can be filed) and return None."""
    from postbox.incident.audit import AuditRecord, append

    record = AuditRecord(command=command, target=target, count=count, outcome=outcome, details=details)
    try:
        where = append(kafka, record)
    except PostboxError as exc:
        err_console.print(f"[bold red]audit:[/] {escape(exc.message)}", highlight=False)
        err_console.print(json.dumps(record.as_dict(), sort_keys=True), highlight=False, markup=False)
        return None
    return {**record.as_dict(), **where}


def _num(n: Any) -> str:
    return f"{n:,}" if isinstance(n, int) else ("" if n is None else str(n))


def _short(value: Any, width: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str, sort_keys=True)
    return text if len(text) <= width else text[: width - 1] + "…"


def _retention(ms: Optional[int]) -> str:
    if ms is None:
        return "?"
    if ms < 0:
        return "forever"
    from postbox.incident.redis_state import human_duration

    return human_duration(timedelta(milliseconds=ms))


# -- topics -----------------------------------------------------------------------------------------
@kafka_client_options
def topics(
    all_topics: bool = typer.Option(False, "--all", help="Every topic, not only outbox.event.* and *.dlq."),
    json_output: bool = JsonOpt,
    kafka_bootstrap: Optional[str] = KafkaOpt,
) -> int:
    settings = _settings(kafka_bootstrap=kafka_bootstrap)
    with _kafka(settings) as kafka:
        names = [t for t in kafka.topic_names() if all_topics or t.startswith("outbox.event.") or t.endswith(".dlq")]
        infos = kafka.describe_topics(names)
    if json_output:
        print_json({"bootstrap": settings.kafka_bootstrap, "topics": [i.as_dict() for i in infos]})
        return 0
    table = Table(title=f"topics on {settings.kafka_bootstrap}")
    table.add_column("topic", overflow="fold", ratio=3)
    for col, width in (("p", 2), ("earliest", 8), ("latest", 8), ("messages", 8), ("retention", 9)):
        table.add_column(col, justify="right", no_wrap=True, min_width=width)
    for info in infos:
        style = "red" if info.kind == "dlq" and info.messages else None
        retention = f"{_retention(info.retention_ms)}" + ("" if (info.cleanup_policy or "delete") == "delete" else f" {info.cleanup_policy}")
        table.add_row(info.name, f"{len(info.partitions)}", "", "", _num(info.messages), retention, style=style)
        if len(info.partitions) > 1 or info.messages:
            for part in info.partitions:
                table.add_row("", f"[dim]{part.partition}[/]", _num(part.low), _num(part.high), _num(part.messages), "", style="dim")
        table.add_section()
    console.print(table)
    if not infos:
        console.print("no outbox topics yet (the router creates outbox.event.<aggregate_type> on the first event)")
    return 0


# -- tail -------------------------------------------------------------------------------------------
@kafka_client_options
def tail(
    topic: str = typer.Argument(..., help="Topic to read, e.g. outbox.event.order or outbox.event.order.dlq."),
    start: Optional[str] = typer.Option(None, "--from", help="beginning | end | last:N | OFFSET | ISO time | duration ago (15m, 2h). Default: beginning, or end with --follow."),
    partition: Optional[list[int]] = typer.Option(None, "--partition", "-p", help="Only these partitions (repeatable)."),
    key: Optional[str] = typer.Option(None, "--key", help="Only records with this key (aggregate id)."),
    event_type: Optional[str] = typer.Option(None, "--event-type", help="Only this event type (header)."),
    event_id: Optional[str] = typer.Option(None, "--event-id", help="Only this event id (header)."),
    where: Optional[list[str]] = typer.Option(None, "--where", help="Payload field filter FIELD=VALUE (dotted path; repeatable)."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep reading new records until --limit or Ctrl-C."),
    limit: Optional[int] = typer.Option(None, "--limit", "-n", min=1, help="Show at most this many matching records (default 50; unlimited with --follow)."),
    max_scan: int = typer.Option(1_000_000, "--max-scan", min=1, help="Examine at most this many records (bounded scan)."),
    idle_timeout: Optional[float] = typer.Option(None, "--idle-timeout", help="With --follow: stop after this many seconds without records."),
    json_output: bool = typer.Option(False, "--json", help="One JSON document; with --follow one JSON object per line."),
    kafka_bootstrap: Optional[str] = KafkaOpt,
) -> int:
    from postbox.incident import tail as tailmod

    try:
        start_at = tailmod.parse_start(start or ("end" if follow else "beginning"))
        fields = tailmod.parse_where(list(where or []))
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    filters = tailmod.Filters(key=key, event_type=event_type, event_id=_event_id(event_id, "--event-id") if event_id else None, fields=fields)
    settings = _settings(kafka_bootstrap=kafka_bootstrap)
    with _kafka(settings) as kafka:
        available = kafka.partitions(topic)
        parts = sorted(set(partition)) if partition else available
        missing = [p for p in parts if p not in available]
        if missing:
            raise typer.BadParameter(f"topic {topic} has partitions {available}, not {missing}", param_hint="--partition")
        if follow:
            if not json_output:
                err_console.print(f"[dim]following {topic} from {start_at.describe()} (Ctrl-C to stop)…[/]")
            try:
                for view in tailmod.follow(kafka, topic, parts, start_at, filters, limit=limit, idle_timeout=idle_timeout):
                    if json_output:
                        sys.stdout.write(json.dumps(view.as_dict(), sort_keys=True, default=str) + "\n")
                        sys.stdout.flush()
                    else:
                        _print_record(view)
            except KeyboardInterrupt:
                pass
            return 0
        result = tailmod.read(kafka, topic, parts, start_at, filters, limit=limit or 50, max_scan=max_scan,
                              progress=_progress(f"reading {topic}"))
    if json_output:
        print_json({
            "topic": topic, "from": start_at.describe(),
            "partitions": {str(p): {"start": result.starts[p], "end": result.ends[p]} for p in parts},
            "scanned": result.scanned, "complete": result.complete, "matched": len(result.records),
            "records": [v.as_dict() for v in result.records],
        })
        return 0
    for view in result.records:
        _print_record(view)
    note = "" if result.complete else f" (stopped after {result.scanned:,} records: --max-scan)"
    err_console.print(f"[dim]{len(result.records)} record(s) shown, {result.scanned:,} scanned from {start_at.describe()}{note}[/]", highlight=False)
    return 0


def _print_record(view: Any) -> None:
    head = (f"[bold]{escape(view.topic)}[/] [cyan]p{view.partition}@{view.offset}[/]  {view.timestamp or '-'}"
            f"  key=[bold]{escape(str(view.key))}[/]" + (" (hex)" if view.key_encoding == "hex" else ""))
    meta = view.meta
    console.print(head, highlight=False)
    console.print(f"  event [green]{escape(str(meta.event_type))}[/] id={meta.event_id} created_at={meta.created_at}"
                  + (f" aggregate={meta.aggregate_type}" if meta.aggregate_type else ""), highlight=False)
    extra = [h for h in view.headers if h["key"] not in ("id", "event_type", "aggregate_type", "created_at")]
    for h in extra:
        if h["value"] is not None:
            console.print(f"  {escape(h['key'])}: {escape(str(h['value']))}" + (" (hex)" if h["encoding"] == "hex" else ""), highlight=False)
    if view.payload is not None:
        from postbox.incident.records import jsonable

        console.print(f"  [{view.encoding}] " + escape(json.dumps(jsonable(view.payload), ensure_ascii=False, sort_keys=True)), highlight=False)
    elif view.value_hex is not None:
        console.print(f"  [red]undecodable[/] ({escape(view.decode_error or '')}): {view.value_size} bytes hex {view.value_hex[:160]}", highlight=False)
    else:
        console.print("  (no value: tombstone)")


# -- trace ------------------------------------------------------------------------------------------
@kafka_client_options
def trace(
    event_id: str = typer.Argument(..., help="The event id (a UUID, or a stock outbox's id) from the outbox row or the record's `id` header."),
    topic: Optional[str] = typer.Option(None, "--topic", help="Search this topic (default: from the outbox row, else every outbox topic)."),
    group: Optional[list[str]] = typer.Option(None, "--group", "-g", help="Only these consumer groups (repeatable)."),
    database_url: Optional[str] = typer.Option(None, "--database-url", help="A role that may read the outbox (else POSTBOX_ADMIN_DATABASE_URL, POSTBOX_MAINT_DATABASE_URL, the local stack's postbox_maint)."),
    marker_ttl: Optional[str] = TtlOpt,
    max_scan: int = typer.Option(2_000_000, "--max-scan", min=1, help="Examine at most this many Kafka records."),
    no_redis_scan: bool = typer.Option(False, "--no-redis-scan", help="Do not SCAN Redis for markers under other anchors."),
    json_output: bool = JsonOpt,
    kafka_bootstrap: Optional[str] = KafkaOpt,
    redis_url: Optional[str] = RedisOpt,
) -> int:
    from postbox.incident.redis_state import RedisState
    from postbox.incident.trace import read_outbox_row, reading_database_url, trace_event

    eid = _event_id(event_id)
    ttl = _ttl(marker_ttl)
    settings = _settings(kafka_bootstrap=kafka_bootstrap, redis_url=redis_url)
    url, source = reading_database_url(database_url, settings.database_url)
    row = read_outbox_row(url, source, eid)
    state = RedisState(settings.redis_url)
    try:
        state.ping()
        with _kafka(settings) as kafka:
            kafka.ping()
            result = trace_event(
                eid, kafka=kafka, redis_state=state, outbox=row, topic=topic, groups=list(group or []) or None,
                marker_ttl=ttl, max_scan=max_scan, scan_redis=not no_redis_scan, progress_factory=_progress,
            )
    finally:
        state.close()
    if json_output:
        print_json(result.as_dict())
        return 1 if result.problem else 0
    _print_trace(result)
    return 1 if result.problem else 0


def _print_trace(result: Any) -> None:
    row = result.outbox
    console.print(f"[bold]event {result.event_id}[/]")
    if row["state"] == "found":
        committed = f", committed {row['committed_at']}" if row.get("committed_at") else ""
        console.print(f"  outbox   row in {row['partition']}: {row['aggregate_type']}/{row['aggregate_id']} {row['event_type']},"
                      f" created {row['created_at']}{committed}, {row['payload_bytes']} payload bytes", highlight=False)
    elif row["state"] == "absent":
        console.print("  outbox   no row (removed by retention, or never written)", highlight=False)
    else:
        console.print(f"  outbox   [yellow]{row['state']}[/]: {escape(row.get('reason', ''))}"
                      + (f" — {escape(row['fix'])}" if row.get("fix") else ""), highlight=False)
    rec = result.record
    if rec is not None:
        dup = f" (+{len(result.records) - 1} redelivered copies)" if len(result.records) > 1 else ""
        console.print(f"  kafka    {rec.topic}[{rec.partition}]@{rec.offset} at {rec.timestamp}, key {rec.key}{dup}", highlight=False)
    else:
        console.print(f"  kafka    not found in {', '.join(result.topics_searched) or 'no topic'} ({result.scanned:,} records searched)", highlight=False)
    colors = {"applied": "green", "waiting": "yellow", "dead-lettered": "red", "failed": "red", "consumed-no-marker": "yellow"}
    for g in result.groups:
        marker = f", marker {g.marker['key']}" if g.marker else ""
        console.print(f"  group    {g.group}: [{colors.get(g.status, 'white')}]{g.status}[/] (committed {_num(g.committed)},"
                      f" {g.members} member(s){escape(marker)})", highlight=False, soft_wrap=True)
        console.print(f"           {escape(g.summary)}", highlight=False, soft_wrap=True)
    for d in result.dead_letters:
        console.print(f"  dlq      {d.ref} group {d.group}: {escape(str(d.error_class))}: {escape(str(d.error))}", highlight=False)
    for note in result.notes:
        console.print(f"  [dim]note: {escape(note)}[/]")
    color = "red" if result.problem else ("yellow" if result.status == "waiting" else "green")
    console.print(f"[bold {color}]verdict:[/] {escape(result.verdict)}", highlight=False, soft_wrap=True)


# -- lag --------------------------------------------------------------------------------------------
@kafka_client_options
def lag(
    group: Optional[str] = typer.Argument(None, help="One consumer group (default: every group reading outbox topics)."),
    topic: Optional[str] = typer.Option(None, "--topic", help="Only this topic."),
    all_topics: bool = typer.Option(False, "--all-topics", help="Include groups' non-outbox topics."),
    max_lag: Optional[int] = typer.Option(None, "--max-lag", min=0, help="Exit 1 when any group's lag exceeds this."),
    json_output: bool = JsonOpt,
    kafka_bootstrap: Optional[str] = KafkaOpt,
    connect_url: Optional[str] = ConnectOpt,
    database_url: Optional[str] = DbOpt,
) -> int:
    from postbox.incident.lag import group_lag, now_ms, pipeline_state

    settings = _settings(kafka_bootstrap=kafka_bootstrap, connect_url=connect_url, database_url=database_url)
    with _kafka(settings) as kafka:
        kafka.ping()
        if topic:
            kafka.require_topic(topic)
        groups = group_lag(kafka, [group] if group else None, all_topics=all_topics, topic=topic)
    from postbox.stack.stack import _connector_name

    pipe = pipeline_state(settings.database_url, settings.connect_url, _connector_name())
    now = now_ms()
    over = max_lag is not None and any(g.total > max_lag for g in groups)
    if json_output:
        print_json({"groups": [g.as_dict(now) for g in groups], **pipe, "max_lag_exceeded": over})
        return 1 if over else 0
    from postbox.incident.redis_state import human_duration

    table = Table(title="consumer lag")
    for col, just in (("group", "left"), ("state", "left"), ("topic", "left"), ("p", "right"), ("committed", "right"),
                      ("end", "right"), ("lag", "right"), ("oldest unconsumed", "right")):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for g in groups:
        state = f"{g.state} ({g.members} member{'s' if g.members != 1 else ''})"
        for i, p in enumerate(g.partitions):
            age = human_duration((now - p.oldest_unconsumed_ms) / 1000) if p.oldest_unconsumed_ms else ""
            table.add_row(g.group if i == 0 else "", state if i == 0 else "", p.topic, str(p.partition), _num(p.committed),
                          _num(p.end), f"[{'red' if p.lag else 'green'}]{p.lag:,}[/]", age)
        table.add_section()
    console.print(table)
    if not groups:
        console.print("no consumer group has committed offsets on outbox topics")
    slot, conn = pipe["slot"], pipe["connector"]
    console.print(f"replication slot {slot.get('name')}: {describe_slot(slot)}", highlight=False)
    tasks = ", ".join(f"task {t['id']} {t['state']}" + (f" ({t['error']})" if t.get("error") else "") for t in conn.get("tasks", []))
    console.print(f"connector {conn['name']}: {conn['state']}" + (f"; {tasks}" if tasks else "") + (f" ({conn['error']})" if conn.get("error") else ""), highlight=False)
    return 1 if over else 0


# -- dlq --------------------------------------------------------------------------------------------
@dlq_app.command("list")
@kafka_client_options
def dlq_list(
    topic: Optional[str] = typer.Option(None, "--topic", help="An origin topic or its .dlq (default: every *.dlq)."),
    event_id: Optional[list[str]] = typer.Option(None, "--event-id", help="Only these events (repeatable)."),
    error_class: Optional[str] = typer.Option(None, "--error-class", help="Only this error class (DecodeError, EffectFailed, EffectFailed:WRONGTYPE, ...)."),
    group: Optional[str] = typer.Option(None, "--group", help="Only dead letters of this consumer group."),
    since: Optional[str] = typer.Option(None, "--since", help="Only dead letters from this long ago (e.g. 2h)."),
    limit: int = typer.Option(100, "--limit", "-n", min=1, help="Show at most this many (the newest)."),
    max_scan: int = typer.Option(200_000, "--max-scan", min=1, help="Examine at most this many records."),
    json_output: bool = JsonOpt,
    kafka_bootstrap: Optional[str] = KafkaOpt,
) -> int:
    from postbox.incident.dlq import Selection, dlq_topics, read_dead_letters

    ids = [_event_id(e, "--event-id") for e in (event_id or [])]
    window = _duration(since, "--since")
    settings = _settings(kafka_bootstrap=kafka_bootstrap)
    with _kafka(settings) as kafka:
        names = dlq_topics(kafka, topic)
        letters, scanned, complete = read_dead_letters(
            kafka, names, Selection(ids, error_class, group),
            since=datetime.now(timezone.utc) - window if window else None, max_scan=max_scan, progress=_progress("reading dead letters"),
        )
    shown = letters[-limit:]
    if json_output:
        print_json({"topics": names, "scanned": scanned, "complete": complete, "total": len(letters),
                    "dead_letters": [d.as_dict() for d in shown]})
        return 0
    table = Table(title=f"dead letters ({len(letters)} in {', '.join(names) or 'no DLQ topic'})")
    for col in ("ref", "dead-lettered", "event id", "type", "key", "group", "class", "error"):
        table.add_column(col)
    for d in shown:
        table.add_row(d.ref, d.record.timestamp or "", d.event_id or "", d.record.meta.event_type or "", str(d.record.key),
                      d.group or "", d.error_class or "", escape(_short(d.error or "", 70)))
    console.print(table)
    if not complete:
        err_console.print(f"[yellow]stopped after {scanned:,} records (--max-scan)[/]")
    return 0


@dlq_app.command("show")
@kafka_client_options
def dlq_show(
    which: str = typer.Argument(..., help="An event id, or a dead letter's ref TOPIC:PARTITION:OFFSET (from `dlq list`)."),
    topic: Optional[str] = typer.Option(None, "--topic", help="Origin topic or its .dlq to search (default: every *.dlq)."),
    json_output: bool = JsonOpt,
    kafka_bootstrap: Optional[str] = KafkaOpt,
) -> int:
    from postbox.incident.dlq import Selection, dlq_topics, find_by_ref, read_dead_letters

    # A ref names a dead-letter topic (TOPIC.dlq:P:O); anything else is an event id, which may hold ':'.
    parts = which.rsplit(":", 2)
    is_ref = len(parts) == 3 and parts[0].endswith(".dlq") and parts[1].isdigit() and parts[2].isdigit()
    eid = None if is_ref else _event_id(which, "WHICH")
    settings = _settings(kafka_bootstrap=kafka_bootstrap)
    with _kafka(settings) as kafka:
        if is_ref:
            letters = [find_by_ref(kafka, which)]
        else:
            letters, _, _ = read_dead_letters(kafka, dlq_topics(kafka, topic), Selection([eid]), progress=_progress("searching dead letters"))
    if not letters:
        raise PostboxError(f"no dead letter for event {eid}", fix=f"`postbox trace {eid}` shows where the event is")
    if json_output:
        print_json({"dead_letters": [d.as_dict(full=True) for d in letters]})
        return 0
    for d in letters:
        console.print(f"[bold]{d.ref}[/]  dead-lettered {d.record.timestamp} by group [bold]{d.group}[/] after {d.attempts} attempt(s)", highlight=False)
        console.print(f"  [red]{escape(str(d.error_class))}[/]: {escape(str(d.error))}", highlight=False)
        console.print(f"  origin {d.origin_topic}[{d.origin_partition}]@{d.origin_offset}, created {d.as_dict()['created_at']}", highlight=False)
        if d.reference_only:
            console.print(f"  [yellow]reference-only[/]: the original record ({d.original_bytes or '?'} bytes) was too large for"
                          f" {d.record.topic} and stays at its origin offset; `postbox dlq replay` reads it from there", highlight=False)
        _print_record(d.record)
    return 0


@dlq_app.command("replay")
@kafka_client_options
def dlq_replay(
    topic: Optional[str] = typer.Option(None, "--topic", help="An origin topic or its .dlq (default: every *.dlq)."),
    event_id: Optional[list[str]] = typer.Option(None, "--event-id", help="Replay these events (repeatable)."),
    error_class: Optional[str] = typer.Option(None, "--error-class", help="Replay every dead letter of this error class."),
    group: Optional[str] = typer.Option(None, "--group", help="Only dead letters of this group."),
    all_letters: bool = typer.Option(False, "--all", help="Replay every dead letter (of --topic, if given)."),
    execute: bool = typer.Option(False, "--execute", help="Send the records (default: dry run, show what would be sent)."),
    force: bool = typer.Option(False, "--force", help="Also replay events whose dedupe markers may have expired."),
    marker_ttl: Optional[str] = TtlOpt,
    margin: str = typer.Option("1h", "--safety-margin", help="Treat markers as expired this long before the TTL ends."),
    yes: bool = YesOpt,
    json_output: bool = JsonOpt,
    kafka_bootstrap: Optional[str] = KafkaOpt,
) -> int:
    from postbox.incident.dlq import Selection, dlq_topics, plan_replay, read_dead_letters, send

    ids = [_event_id(e, "--event-id") for e in (event_id or [])]
    if not (ids or error_class or all_letters):
        raise typer.BadParameter("choose what to replay: --event-id, --error-class or --all", param_hint="selection")
    ttl = _ttl(marker_ttl)
    safety = _duration(margin, "--safety-margin") or timedelta(0)
    settings = _settings(kafka_bootstrap=kafka_bootstrap)
    with _kafka(settings) as kafka:
        names = dlq_topics(kafka, topic)
        letters, scanned, complete = read_dead_letters(kafka, names, Selection(ids, error_class, group), progress=_progress("reading dead letters"))
        if not letters:
            raise PostboxError("no dead letter matches the selection", fix="`postbox dlq list` shows the dead letters")
        items = plan_replay(kafka, letters, marker_ttl=ttl, margin=safety, force=force)
        ready = [i for i in items if i.status == "ready"]
        unsafe = [i for i in items if i.status == "unsafe"]
        audit_entry = None
        if execute and ready:
            _confirm(f"send {len(ready)} dead letter(s) back to {', '.join(sorted({i.topic for i in ready}))}?", yes)
            sent = send(kafka, ready)
            audit_entry = _audit(
                kafka, "dlq replay", ", ".join(sorted({i.topic for i in ready})), sent,
                "ok" if sent == len(ready) else "partial",
                {"selection": {"event_ids": ids, "error_class": error_class, "group": group, "all": all_letters, "topic": topic},
                 "force": force, "marker_ttl_s": ttl.total_seconds(), "refused_unsafe": len(unsafe),
                 "items": [{"ref": i.letter.ref, "event_id": i.letter.event_id, "status": i.status, "sent": i.sent} for i in items]},
            )
    failed = [i for i in items if i.status == "failed"]
    problem = bool(unsafe or failed or (execute and ready and audit_entry is None))
    if json_output:
        print_json({
            "dry_run": not execute, "topics": names, "scanned": scanned, "complete": complete,
            "marker_ttl_seconds": ttl.total_seconds(), "safety_margin_seconds": safety.total_seconds(),
            "items": [i.as_dict() for i in items],
            "summary": {s: sum(1 for i in items if i.status == s) for s in ("ready", "sent", "failed", "unsafe", "duplicate", "no-origin")},
            "audit": audit_entry,
        })
        return 1 if problem else 0
    table = Table(title=("dry run: " if not execute else "") + f"replay of {len(items)} dead letter(s)")
    for col in ("ref", "event id", "class", "to", "age", "status", "note"):
        table.add_column(col)
    from postbox.incident.redis_state import human_duration

    colors = {"ready": "cyan", "sent": "green", "unsafe": "red", "failed": "red", "duplicate": "dim", "no-origin": "red"}
    for i in items:
        to = f"{i.topic}[{i.partition if i.partition is not None else 'by key'}]"
        if i.sent and "offset" in i.sent:
            to = f"{i.sent['topic']}[{i.sent['partition']}]@{i.sent['offset']}"
        note = i.reason or (i.sent or {}).get("error", "")
        table.add_row(i.letter.ref, i.letter.event_id or "", i.letter.error_class or "", to, human_duration(i.age),
                      f"[{colors.get(i.status, 'white')}]{i.status}[/]", escape(note))
    console.print(table)
    if not execute:
        console.print(f"dry run: nothing sent. {len(ready)} ready" + (f", {len(unsafe)} refused as unsafe (--force to include)" if unsafe else "")
                      + "; run again with --execute to send.", highlight=False)
    else:
        sent_n = sum(1 for i in items if i.status == "sent")
        console.print(f"sent {sent_n} record(s)" + (f"; {len(failed)} failed" if failed else "")
                      + (f"; {len(unsafe)} refused as unsafe (--force to include)" if unsafe else "")
                      + ("; audit record written" if audit_entry else ""), highlight=False)
    return 1 if problem else 0


# -- replay (offset reset) ------------------------------------------------------------------------
@kafka_client_options
def replay(
    group: str = typer.Option(..., "--group", "-g", help="The consumer group to rewind (must have no members)."),
    to: str = typer.Option(..., "--to", help="earliest | latest | OFFSET | ISO time | duration ago (2h)."),
    topic: Optional[list[str]] = typer.Option(None, "--topic", help="Topics to reset (default: every topic the group committed)."),
    partition: Optional[int] = typer.Option(None, "--partition", help="Only this partition."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the plan only."),
    force: bool = typer.Option(False, "--force", help="Allow a reset that re-reads events past the dedupe window or skips events."),
    marker_ttl: Optional[str] = TtlOpt,
    margin: str = typer.Option("1h", "--safety-margin", help="Treat markers as expired this long before the TTL ends."),
    yes: bool = YesOpt,
    json_output: bool = JsonOpt,
    kafka_bootstrap: Optional[str] = KafkaOpt,
) -> int:
    from postbox.incident.offsets import apply_reset, parse_target, plan_reset

    try:
        target = parse_target(to)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--to") from None
    ttl = _ttl(marker_ttl)
    safety = _duration(margin, "--safety-margin") or timedelta(0)
    settings = _settings(kafka_bootstrap=kafka_bootstrap)
    with _kafka(settings) as kafka:
        kafka.ping()
        for t in topic or []:
            kafka.require_topic(t)
        plan = plan_reset(kafka, group, target, topics=list(topic or []) or None, partition=partition,
                          marker_ttl=ttl, margin=safety, force=force)
        applied = False
        audit_entry = None
        if not dry_run and not plan.refused:
            _confirm(f"reset group {group} to {target.describe()} on {len(plan.moves)} partition(s)?", yes)
            apply_reset(kafka, plan)
            applied = True
            audit_entry = _audit(kafka, "replay", group, sum(max(0, m.delta) for m in plan.moves), "ok",
                                 {"to": target.describe(), "force": force, "plan": plan.as_dict()})
    if json_output:
        print_json({**plan.as_dict(), "dry_run": dry_run, "applied": applied, "audit": audit_entry})
    else:
        table = Table(title=f"{'plan: ' if not applied else ''}reset {group} to {target.describe()}")
        for col in ("topic", "p", "current", "new", "re-consumed", "skipped", "oldest re-consumed"):
            table.add_column(col)
        for m in plan.moves:
            d = m.as_dict()
            table.add_row(m.topic, str(m.partition), _num(m.current), _num(m.new), _num(d["reconsumed"]), _num(d["skipped"]), d["oldest_reconsumed_at"] or "")
        console.print(table)
        for p in plan.problems:
            console.print(f"[yellow]warning:[/] {escape(p)}", highlight=False)
        if applied:
            console.print(f"[green]offsets of {group} reset[/]; start its consumers to re-consume" + ("; audit record written" if audit_entry else ""))
        elif dry_run:
            console.print("dry run: nothing changed")
    if plan.refused:
        raise UnsafeReplayError(f"refused to reset {group}: {plan.problems[0]}", fix="pass --force if that is what you want")
    return 0 if (applied or dry_run) and (not applied or audit_entry is not None) else 1


# -- connector ----------------------------------------------------------------------------------------
def _connector_name(name: Optional[str]) -> str:
    if name:
        return name
    from postbox.stack.stack import _connector_name as default

    return default()


@connector_app.command("status")
def connector_status(
    name: Optional[str] = typer.Option(None, "--name", help="Connector name (default: from the packaged connector template)."),
    json_output: bool = JsonOpt,
    connect_url: Optional[str] = ConnectOpt,
) -> int:
    from postbox.connect_client import ConnectClient

    settings = _settings(connect_url=connect_url)
    cname = _connector_name(name)
    with ConnectClient(settings.connect_url, timeout=5) as client:
        state = client.status(cname)
        config = client.config(cname) if state is not None else None
    if state is None:
        if json_output:
            print_json({"name": cname, "state": "not registered", "tasks": [], "config": None})
        else:
            console.print(f"connector {cname}: [red]not registered[/] at {settings.connect_url} — `postbox connector apply`")
        return 1
    data = {
        "name": cname, "state": state.connector_state, "worker": state.worker, "running": state.running,
        "tasks": [{"id": t["id"], "state": t["state"], "worker": t.get("worker_id"),
                   "error": (t.get("trace") or "").strip().splitlines()[0] if t.get("trace") else None} for t in state.tasks],
        "config": {k: v for k, v in (config or {}).items() if "password" not in k.lower()},
    }
    if json_output:
        print_json(data)
        return 0 if state.running else 1
    color = "green" if state.running else "red"
    console.print(f"connector [bold]{cname}[/]: [{color}]{state.connector_state}[/] on {state.worker}", highlight=False)
    for t in data["tasks"]:
        tc = "green" if t["state"] == "RUNNING" else "red"
        console.print(f"  task {t['id']}: [{tc}]{t['state']}[/] on {t['worker']}" + (f" — {escape(t['error'])}" if t["error"] else ""), highlight=False)
    cfg = data["config"]
    console.print(f"  slot {cfg.get('slot.name')}, publication {cfg.get('publication.name')}, tables {cfg.get('table.include.list')},"
                  f" topics {cfg.get('transforms.outbox.route.topic.replacement')}", highlight=False)
    return 0 if state.running else 1


@connector_app.command("restart")
@kafka_client_options
def connector_restart(
    name: Optional[str] = typer.Option(None, "--name", help="Connector name (default: from the packaged connector template)."),
    wait: float = typer.Option(60.0, "--wait", help="Seconds to wait for RUNNING afterwards (0: do not wait)."),
    yes: bool = YesOpt,
    json_output: bool = JsonOpt,
    connect_url: Optional[str] = ConnectOpt,
    kafka_bootstrap: Optional[str] = KafkaOpt,
) -> int:
    from postbox.connect_client import ConnectClient
    from postbox.errors import ConnectError

    settings = _settings(connect_url=connect_url, kafka_bootstrap=kafka_bootstrap)
    cname = _connector_name(name)
    with ConnectClient(settings.connect_url, timeout=10) as client:
        before = client.status(cname)
        if before is None:
            raise ConnectError(f"connector {cname} is not registered at {settings.connect_url}", fix="`postbox connector apply`")
        _confirm(f"restart connector {cname} and its tasks (now {before.connector_state})?", yes)
        client.restart(cname, include_tasks=True)
        outcome, state = "restarted", None
        if wait > 0:
            try:
                state = client.wait_running(cname, timeout=wait)
            except ConnectError as exc:
                outcome = f"restarted, not running: {exc.message}"
    with _kafka(settings) as kafka:
        entry = _audit(kafka, "connector restart", cname, 1, "ok" if state or wait <= 0 else "failed",
                       {"before": before.connector_state, "after": state.connector_state if state else None})
    ok = (state is not None or wait <= 0) and entry is not None
    if json_output:
        print_json({"name": cname, "outcome": outcome, "before": before.connector_state,
                    "after": state.connector_state if state else None, "audit": entry})
    else:
        console.print(f"connector {cname}: {outcome}" + (f", now {state.connector_state}" if state else "") + ("; audit record written" if entry else ""), highlight=False)
    return 0 if ok else 1


@connector_app.command("apply")
@kafka_client_options
def connector_apply(
    file: Optional[Path] = typer.Option(None, "--file", help="Connector JSON (default: the packaged template, postbox/connectors/outbox.json)."),
    topics_file: Optional[Path] = typer.Option(None, "--topics-file", help="Partitions/replication per aggregate type for new topics (JSON; env POSTBOX_TOPICS_FILE)."),
    yes: bool = YesOpt,
    wait: float = typer.Option(0.0, "--wait", help="Then wait up to this many seconds for connector and tasks to be RUNNING."),
    json_output: bool = JsonOpt,
    connect_url: Optional[str] = ConnectOpt,
    kafka_bootstrap: Optional[str] = KafkaOpt,
) -> int:
    from postbox.connect_client import ConnectClient, ConnectorFile

    if file is None:
        from postbox.resources import CONNECTOR_TEMPLATE

        file = CONNECTOR_TEMPLATE
    from postbox.topic_creation import TopicsConfig, connector_with_topics

    connector = connector_with_topics(ConnectorFile.load(file), TopicsConfig.load(topics_file))
    settings = _settings(connect_url=connect_url, kafka_bootstrap=kafka_bootstrap)
    with ConnectClient(settings.connect_url, timeout=10) as client:
        current = client.config(connector.name)
        wanted = {**connector.config, "name": connector.name}
        changes = sorted(k for k in set(wanted) | set(current or {}) if (current or {}).get(k) != wanted.get(k))
        if current is not None and not changes:
            outcome = "unchanged"
        else:
            verb = "create" if current is None else f"update {len(changes)} setting(s) of"
            _confirm(f"{verb} connector {connector.name} from {file}?", yes)
            outcome = client.apply(connector)
        if wait > 0:
            client.wait_running(connector.name, wait)
    entry = None
    if outcome != "unchanged":
        with _kafka(settings) as kafka:
            entry = _audit(kafka, "connector apply", connector.name, len(changes), "ok", {"file": str(file), "outcome": outcome, "changed": changes})
    if json_output:
        print_json({"name": connector.name, "file": str(file), "outcome": outcome, "changed": changes, "audit": entry})
    else:
        console.print(f"connector {connector.name}: {outcome}" + (f" ({', '.join(changes)})" if changes and outcome != "unchanged" else ""), highlight=False)
    return 0 if outcome == "unchanged" or entry is not None else 1


# -- doctor --------------------------------------------------------------------------------------------
@kafka_client_options
def doctor(
    json_output: bool = JsonOpt,
    kafka_bootstrap: Optional[str] = KafkaOpt,
    redis_url: Optional[str] = RedisOpt,
    connect_url: Optional[str] = ConnectOpt,
    database_url: Optional[str] = DbOpt,
) -> int:
    from postbox.incident.doctor import run_checks
    from postbox.incident.kafka import Kafka

    settings = _settings(kafka_bootstrap=kafka_bootstrap, redis_url=redis_url, connect_url=connect_url, database_url=database_url)
    checks = run_checks(settings, _connector_name(None), lambda: Kafka(settings.kafka_bootstrap, properties=settings.kafka_properties))
    failed = [c for c in checks if c.status == "fail"]
    if json_output:
        print_json({"ok": not failed, "checks": [c.as_dict() for c in checks]})
        return 1 if failed else 0
    marks = {"ok": "[green]✓[/]", "warn": "[yellow]![/]", "fail": "[red]✗[/]", "skip": "[dim]-[/]"}
    for c in checks:
        console.print(f"{marks[c.status]} {c.name}: {escape(c.detail)}" + (f"\n    [bold]fix:[/] {escape(c.fix)}" if c.fix and c.status != "ok" else ""), highlight=False)
    warns = sum(1 for c in checks if c.status == "warn")
    console.print(f"{len(checks)} checks: {len(failed)} failed, {warns} warning(s)", highlight=False)
    return 1 if failed else 0


# -- audit ----------------------------------------------------------------------------------------------
@kafka_client_options
def audit(
    since: Optional[str] = typer.Option(None, "--since", help="Only records from this long ago (e.g. 12h)."),
    command: Optional[str] = typer.Option(None, "--command", help="Only this command (replay, dlq replay, connector restart, ...)."),
    limit: int = typer.Option(100, "--limit", "-n", min=1, help="Show at most this many (the newest)."),
    json_output: bool = JsonOpt,
    kafka_bootstrap: Optional[str] = KafkaOpt,
) -> int:
    from postbox.incident.audit import audit_topic, read

    window = _duration(since, "--since")
    settings = _settings(kafka_bootstrap=kafka_bootstrap)
    with _kafka(settings) as kafka:
        kafka.ping()
        records = read(kafka, since=window, limit=limit, command=command)
    if json_output:
        print_json({"topic": audit_topic(), "records": records})
        return 0
    table = Table(title=f"audit trail ({audit_topic()})")
    for col in ("at", "who", "command", "target", "count", "outcome"):
        table.add_column(col)
    for r in records:
        table.add_row(r.get("at", ""), f"{r.get('user')}@{r.get('host')}", r.get("command", ""), escape(str(r.get("target", ""))),
                      _num(r.get("count")), r.get("outcome", ""))
    console.print(table)
    if not records:
        console.print("no audit records" + (" in that window" if window else ""))
    return 0


__all__ = ["register", "AuditError"]
