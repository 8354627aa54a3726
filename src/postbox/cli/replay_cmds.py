"""`postbox replay --group G --to …`: move a stopped group's committed offsets (re-consume).

Safe by default, like kafka-consumer-groups: without ``--execute`` it prints the plan and changes
nothing. ``--export FILE`` writes the plan (CSV ``topic,partition,offset``) and ``--from-file FILE``
applies such a plan, so the plan reviewed is the plan executed.

``--until SPEC`` (with ``--to`` or ``--to-current``) plans a *window* instead of a reset: an offset
reset alone cannot end anywhere (the group would re-read everything up to now). The dry run prints
each partition's start, end and record count; ``--execute --app MODULE:APP`` runs the window as
``postbox consume MODULE:APP --from … --until …`` does (:mod:`postbox.consumer.window`): applied
through the group's markers, never committed, allowed while the group runs where it starts at or
before the group's committed offsets (:mod:`postbox.incident.window_order`).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Optional

import typer

from postbox.cli.client_options import kafka_client_options
from postbox.cli.incident_common import (
    KafkaOpt,
    YesOpt,
    confirm,
    duration,
    group_id,
    kafka_for,
    settings_for,
    write_audit,
)
from postbox.cli.output import (
    JsonAliasOpt,
    Listing,
    OutputFormat,
    OutputOpt,
    note,
    output_format,
    print_json,
    print_listing,
)
from postbox.errors import UnknownGroupError, UnsafeReplayError


def register(app: typer.Typer) -> None:
    app.command("replay", help="Plan (and with --execute, apply) a reset of a stopped group's offsets — re-consume from a time, an offset, a shift — or, with --until, a bounded window beside the running group.")(replay)


@kafka_client_options
def replay(
    group: str = typer.Option(..., "--group", "-g", callback=group_id, help="The consumer group to rewind (a reset needs it stopped: no members; a window --until does not)."),
    to: Optional[str] = typer.Option(None, "--to", help="earliest | latest | OFFSET | ISO time | duration ago (2h)."),
    shift_by: Optional[int] = typer.Option(None, "--shift-by", help="Move each partition N records from its committed offset (negative: re-consume N)."),
    to_current: bool = typer.Option(False, "--to-current", help="Keep the committed offsets (a plan to --export, or commits for partitions without one)."),
    from_file: Optional[Path] = typer.Option(None, "--from-file", help="Apply a plan written by --export (CSV topic,partition,offset)."),
    topic: Optional[list[str]] = typer.Option(None, "--topic", metavar="TOPIC", help="A topic to reset (repeatable; default: every topic the group committed)."),
    partition: Optional[int] = typer.Option(None, "--partition", min=0, help="Only this partition."),
    execute: bool = typer.Option(False, "--execute", help="Apply the plan (default: a dry run that prints it and changes nothing)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan only (the default; kept for scripts that pass it)."),
    export: Optional[Path] = typer.Option(None, "--export", help="Write the plan to FILE (CSV topic,partition,offset, as kafka-consumer-groups)."),
    force: bool = typer.Option(False, "--force", help="Allow a reset that re-reads events past the dedupe window or skips events."),
    marker_ttl: Optional[str] = typer.Option(None, "--marker-ttl", help="Dedupe marker TTL of the group (env POSTBOX_MARKER_TTL; "
                                             "default: the TTL the group published at its last start, else 8d)."),
    margin: str = typer.Option("1h", "--safety-margin", help="Treat markers as expired this long before the TTL ends."),
    yes: bool = YesOpt,
    output: Optional[OutputFormat] = OutputOpt,
    json_output: bool = JsonAliasOpt,
    kafka_bootstrap: Optional[str] = KafkaOpt,
    until: Optional[str] = typer.Option(None, "--until", help="End a window there (exclusive; OFFSET | ISO time | duration ago | end): with --to/--to-current, plan (and with --execute --app, run) a bounded window instead of a reset."),
    app_spec: Optional[str] = typer.Option(None, "--app", metavar="MODULE:APP", help="With --until --execute: the handlers that apply the window (as `postbox consume MODULE:APP`)."),
) -> int:
    from postbox.incident.offsets import write_plan_file
    from postbox.incident.redis_state import group_marker_ttl

    fmt = output_format(output, json_output)
    if execute and dry_run:
        raise typer.BadParameter("--execute and --dry-run contradict each other", param_hint="--execute")
    settings = settings_for(kafka_bootstrap=kafka_bootstrap)
    if until is not None:
        request = _window_request(group, to, shift_by, to_current, from_file, export, until, app_spec, topic, partition, execute)
        return _replay_window(request, force=force, ttl=group_marker_ttl(marker_ttl, group, settings.redis_url),
                              margin=duration(margin, "--safety-margin") or timedelta(0), yes=yes, fmt=fmt, settings=settings)  # fmt: skip
    if app_spec is not None:
        raise typer.BadParameter("--app names the handlers of a window run: it goes with --until", param_hint="--app")
    target = _target(to, shift_by, to_current, from_file)
    ttl = group_marker_ttl(marker_ttl, group, settings.redis_url)
    safety = duration(margin, "--safety-margin") or timedelta(0)
    with kafka_for(settings) as kafka:
        plan = _plan_reset(kafka, group, target, topic, partition, ttl=ttl, safety=safety, force=force)
        if export is not None:
            write_plan_file(plan, export)
        audit_entry = _apply_reset(kafka, plan, force=force, yes=yes) if execute and not plan.refused else None
    return _report_reset(plan, fmt, execute=execute, audit_entry=audit_entry, export=export)


def _plan_reset(kafka: Any, group: str, target: Any, topic: Optional[list[str]], partition: Optional[int], *,
                ttl: timedelta, safety: timedelta, force: bool) -> Any:  # fmt: skip
    """The reset plan, once Kafka answers and every topic named (by --topic or in the plan file) exists."""
    from postbox.incident.offsets import plan_reset

    kafka.ping()
    for t in [*(topic or []), *target.topics()]:
        kafka.require_topic(t)
    return plan_reset(kafka, group, target, topics=list(topic or []) or None, partition=partition,
                      marker_ttl=ttl, margin=safety, force=force)


def _apply_reset(kafka: Any, plan: Any, *, force: bool, yes: bool) -> Optional[dict[str, Any]]:
    """Commit a plan that was not refused, once confirmed; the audit record written (None when it could not be)."""
    from postbox.incident.offsets import apply_reset, reset_audit

    confirm(f"reset group {plan.group} to {plan.target.describe()} on {len(plan.moves)} partition(s)?", yes)
    apply_reset(kafka, plan)
    return write_audit(kafka, reset_audit(plan, force))


def _report_reset(plan: Any, fmt: OutputFormat, *, execute: bool, audit_entry: Optional[dict[str, Any]], export: Optional[Path]) -> int:
    """Print the plan (and what was done); a refused plan is an error, an applied one without its
    audit record exit 1."""
    applied = execute and not plan.refused
    if fmt is OutputFormat.json:
        print_json({**plan.as_dict(), "dry_run": not execute, "applied": applied, "audit": audit_entry,
                    "exported_to": str(export) if export else None})
    else:
        _print_plan(plan, fmt, applied=applied, audited=audit_entry is not None, export=export)
    if plan.refused:
        raise UnsafeReplayError(f"refused to reset {plan.group}: {plan.problems[0]}", fix="pass --force if that is what you want")
    return 1 if applied and audit_entry is None else 0


def _target(to: Optional[str], shift_by: Optional[int], to_current: bool, from_file: Optional[Path]) -> Any:
    """Exactly one of --to, --shift-by, --to-current, --from-file, as a reset target."""
    from postbox.incident.offsets import Target, parse_target, read_plan_file, shift_target

    given = [name for name, value in (("--to", to), ("--shift-by", shift_by), ("--to-current", to_current or None),
                                      ("--from-file", from_file)) if value is not None]
    if len(given) != 1:
        raise typer.BadParameter("choose one of --to, --shift-by, --to-current, --from-file" + (f" (got {', '.join(given)})" if given else ""),
                                 param_hint="--to")
    if from_file is not None:
        return read_plan_file(from_file)
    if shift_by is not None:
        return shift_target(shift_by)
    if to_current:
        return Target("current")
    try:
        return parse_target(to or "")
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--to") from None


def _print_plan(plan: Any, fmt: OutputFormat, *, applied: bool, audited: bool, export: Optional[Path]) -> None:
    listing = Listing(f"{'plan: ' if not applied else ''}reset {plan.group} to {plan.target.describe()}",
                      ("topic", "p", "current", "new", "re-consumed", "skipped", "oldest re-consumed"),
                      right=("p", "current", "new", "re-consumed", "skipped"))
    for m in plan.moves:
        d = m.as_dict()
        listing.add(m.topic, m.partition, m.current, m.new, d["reconsumed"], d["skipped"], d["oldest_reconsumed_at"])
    print_listing(listing, fmt)
    for p in plan.problems[1 if plan.refused else 0:]:  # a refusal's reason is the error line itself
        note(f"warning: {p}", fmt)
    if export is not None:
        note(f"plan written to {export}; apply it with --from-file {export} --execute", fmt)
    if applied:
        note(f"offsets of {plan.group} reset; start its consumers to re-consume" + ("; audit record written" if audited else ""), fmt)
    elif not plan.refused:
        note("dry run: nothing changed; run again with --execute to apply this plan", fmt)



@dataclass(frozen=True)
class WindowRequest:
    """``replay --until``'s flags, checked: the window's ends and where it applies."""

    group: str
    start: Any
    end: Any
    from_text: str
    until_text: str
    app_spec: Optional[str]
    topics: list[str]
    partitions: Optional[list[int]]
    execute: bool

    def consume_line(self) -> str:
        """The equivalent `postbox consume` command line (what --execute runs)."""
        words = ["postbox", "consume", self.app_spec or "MODULE:APP", "--group", self.group]
        if self.topics:
            words += ["--topics", ",".join(self.topics)]
        words += ["--from", _fixed(self.start, self.from_text), "--until", _fixed(self.end, self.until_text)]
        for p in self.partitions or []:
            words += ["--partition", str(p)]
        return " ".join(shlex.quote(w) if w != "MODULE:APP" else w for w in words)


def _fixed(position: Any, text: str) -> str:
    """A window end as typed, except a time (ISO or a duration ago), which is given as the instant
    it resolved to: the line then runs the window the plan shows, whenever it is run."""
    from postbox.incident.records import iso_ms

    return str(iso_ms(position.value)) if position.kind == "timestamp" else text


def _window_request(group: str, to: Optional[str], shift_by: Optional[int], to_current: bool, from_file: Optional[Path],
                    export: Optional[Path], until: str, app_spec: Optional[str], topic: Optional[list[str]],
                    partition: Optional[int], execute: bool) -> WindowRequest:  # fmt: skip
    """Usage errors (exit 2) of a window, before anything is asked of Kafka."""
    from postbox.incident.window import COMMITTED, check_order, parse_window_end, parse_window_start

    if shift_by is not None or from_file is not None or export is not None:
        flag = "--shift-by" if shift_by is not None else "--from-file" if from_file is not None else "--export"
        raise typer.BadParameter(f"--until ends a window that starts at --to or --to-current, not {flag}", param_hint="--until")
    if (to is None) == (not to_current):
        raise typer.BadParameter("a window needs one start: --to SPEC or --to-current (the group's committed offsets)", param_hint="--to")
    from_text = COMMITTED if to_current else str(to)
    try:
        start = parse_window_start(from_text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc).replace("--from", "--to"), param_hint="--to") from None
    try:
        end = parse_window_end(until)
        check_order(start, end)
    except ValueError as exc:
        raise typer.BadParameter(str(exc).replace("--from", "--to"), param_hint="--until") from None
    request = WindowRequest(group, start, end, from_text, until, app_spec, list(topic or []),
                            [partition] if partition is not None else None, execute)  # fmt: skip
    if execute and app_spec is None:
        raise typer.BadParameter(f"--execute with --until runs the window through handlers: name them with --app MODULE:APP "
                                 f"(the same as: {request.consume_line()})", param_hint="--app")  # fmt: skip
    return request


def _replay_window(request: WindowRequest, *, force: bool, ttl: timedelta, margin: timedelta, yes: bool,
                   fmt: OutputFormat, settings: Any) -> int:  # fmt: skip
    """Plan the window; with --execute, run it (allowed while the group runs: it never commits)."""
    from postbox.cli.consume_cmds import execute_window
    from postbox.incident.window import COMMITTED, check_group_position, check_marker_window, plan_window
    from postbox.incident.window_order import refuse_or_warn

    with kafka_for(settings) as kafka:
        kafka.ping()
        committed = kafka.committed(request.group)
        topics, app, config = _window_topics(kafka, request, committed, settings)
        plan = plan_window(kafka, topics, request.start, request.end, partitions=request.partitions,
                           committed=committed if request.start.kind == COMMITTED else None)  # fmt: skip
        ahead = check_group_position(kafka, plan, request.group, offset_reset=_offset_reset(config))
        check_marker_window(kafka, plan, ttl, margin)
    refused = bool(plan.problems) and not force
    run = request.execute and not refused
    _show_window_plan(request, plan, fmt, refused=refused, run=run)
    if not force or run:  # a forced dry run runs nothing to warn about
        refuse_or_warn(request.group, ahead, members=plan.members, force=force)
    if refused:
        raise UnsafeReplayError(f"refused to replay the window of {request.group}: {plan.problems[0]}", fix="pass --force if that is what you want")
    if not run:
        return 0
    confirm(f"apply {plan.records:,} record(s) of group {request.group} {plan.describe()}?", yes)
    code, summary = execute_window(app, config, plan)
    audit = _audit_window(settings, request, plan, code, summary)
    _print_window_run(request, plan, fmt, code=code, summary=summary, audit=audit)
    return code


def _window_topics(kafka: Any, request: WindowRequest, committed: Any, settings: Any) -> tuple[list[str], Any, Any]:
    """The window's topics (--topic, else the group's committed ones; with --app, its handlers'), each
    required to exist, and the app and its configuration when --app is given (else None, None)."""
    from postbox.cli.consume_cmds import load_window_app

    app = config = None
    topics = request.topics or sorted({t for t, _ in committed})
    if request.app_spec is not None:
        app, config = load_window_app(request.app_spec, request.group, request.topics, topics, settings)
        topics = list(config.topics)
    if not topics:
        raise UnknownGroupError(f"group {request.group} has no committed offsets, so the window has no topics",
                                fix="name them with --topic (or --app MODULE:APP for its handlers' topics)")  # fmt: skip
    for t in topics:
        kafka.require_topic(t)
    return topics, app, config


def _show_window_plan(request: WindowRequest, plan: Any, fmt: OutputFormat, *, refused: bool, run: bool) -> None:
    """The window's plan before anything runs: on stderr in TSV when it runs (stdout carries the
    run's summary lines), a listing otherwise; as JSON only for a dry run (a run prints its own)."""
    from postbox.cli.consume_cmds import print_window_plan

    if fmt is OutputFormat.tsv and run:
        print_window_plan(request.group, plan)  # on stderr: stdout carries the run's summary lines
    elif fmt is not OutputFormat.json:
        _print_window(request, plan, fmt, refused=refused, run=run)
    if not run and fmt is OutputFormat.json:
        print_json({"group": request.group, "window": plan.as_dict(), "dry_run": True, "refused": refused, "consume": request.consume_line()})


def _print_window_run(request: WindowRequest, plan: Any, fmt: OutputFormat, *, code: int, summary: list[Any],
                      audit: Optional[dict[str, Any]]) -> None:  # fmt: skip
    """What a window run did: one JSON document, or a line per partition."""
    if fmt is OutputFormat.json:
        print_json({"group": request.group, "window": plan.as_dict(), "dry_run": False, "exit_code": code, "audit": audit,
                    "partitions": [{**t.as_dict(), "reached_end": reached} for t, reached in summary]})  # fmt: skip
    else:
        for tally, reached in summary:
            typer.echo(tally.line(reached))


def _offset_reset(config: Any) -> str:
    """The group's ``auto.offset.reset`` as its members read it: the app's configuration when
    --app is given, else ``POSTBOX_AUTO_OFFSET_RESET`` (default earliest). Only the refusal's
    wording depends on it (:mod:`postbox.incident.window_order`)."""
    if config is not None:
        return str(config.auto_offset_reset)
    import os

    return "latest" if os.environ.get("POSTBOX_AUTO_OFFSET_RESET", "").strip().lower() == "latest" else "earliest"


def _print_window(request: WindowRequest, plan: Any, fmt: OutputFormat, *, refused: bool, run: bool) -> None:
    listing = Listing(f"{'' if run else 'plan: '}window of {request.group} {plan.describe()}",
                      ("topic", "p", "start", "end", "records", "note"), right=("p", "start", "end", "records"))  # fmt: skip
    for row in plan.rows:
        s = row.span
        listing.add(s.topic, s.partition, s.start, s.end, s.records, "; ".join(row.notes))
    print_listing(listing, fmt)
    for problem in plan.problems[1 if refused else 0:]:  # a refusal's reason is the error line itself
        note(f"warning: {problem}", fmt)
    if not run and not refused:
        note(f"dry run: nothing applied; {plan.records:,} record(s) in the window. Run it with --execute --app MODULE:APP, "
             f"or: {request.consume_line()}", fmt)  # fmt: skip


def _audit_window(settings: Any, request: WindowRequest, plan: Any, code: int, summary: list[Any]) -> Optional[dict[str, Any]]:
    """The audit record of a window run: how many records it re-read (as a reset's record counts the
    records re-consumed), the plan, and what became of them per partition."""
    from postbox.incident.audit import AuditRecord

    record = AuditRecord(command="replay", target=request.group, count=plan.records, outcome="ok" if code == 0 else f"exit {code}",
                         details={"window": plan.as_dict(), "app": request.app_spec,
                                  "partitions": [{**t.as_dict(), "reached_end": reached} for t, reached in summary]})  # fmt: skip
    with kafka_for(settings) as kafka:
        return write_audit(kafka, record)
