"""`postbox replay --group G --to …`: move a stopped group's committed offsets (re-consume).

Safe by default, like kafka-consumer-groups: without ``--execute`` it prints the plan and changes
nothing. ``--export FILE`` writes the plan (CSV ``topic,partition,offset``) and ``--from-file FILE``
applies such a plan, so the plan reviewed is the plan executed.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any, Optional

import typer

from postbox.cli.client_options import kafka_client_options
from postbox.cli.incident_common import (
    KafkaOpt,
    TtlOpt,
    YesOpt,
    confirm,
    duration,
    group_id,
    kafka_for,
    marker_ttl as resolve_ttl,
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
from postbox.errors import UnsafeReplayError


def register(app: typer.Typer) -> None:
    app.command("replay", help="Plan (and with --execute, apply) a reset of a stopped group's offsets: re-consume from a time, an offset, a shift.")(replay)


@kafka_client_options
def replay(
    group: str = typer.Option(..., "--group", "-g", callback=group_id, help="The consumer group to rewind (must have no members)."),
    to: Optional[str] = typer.Option(None, "--to", help="earliest | latest | OFFSET | ISO time | duration ago (2h)."),
    shift_by: Optional[int] = typer.Option(None, "--shift-by", help="Move each partition N records from its committed offset (negative: re-consume N)."),
    to_current: bool = typer.Option(False, "--to-current", help="Keep the committed offsets (a plan to --export, or commits for partitions without one)."),
    from_file: Optional[Path] = typer.Option(None, "--from-file", help="Apply a plan written by --export (CSV topic,partition,offset)."),
    topic: Optional[list[str]] = typer.Option(None, "--topic", help="Topics to reset (default: every topic the group committed)."),
    partition: Optional[int] = typer.Option(None, "--partition", min=0, help="Only this partition."),
    execute: bool = typer.Option(False, "--execute", help="Apply the plan (default: a dry run that prints it and changes nothing)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan only (the default; kept for scripts that pass it)."),
    export: Optional[Path] = typer.Option(None, "--export", help="Write the plan to FILE (CSV topic,partition,offset, as kafka-consumer-groups)."),
    force: bool = typer.Option(False, "--force", help="Allow a reset that re-reads events past the dedupe window or skips events."),
    marker_ttl: Optional[str] = TtlOpt,
    margin: str = typer.Option("1h", "--safety-margin", help="Treat markers as expired this long before the TTL ends."),
    yes: bool = YesOpt,
    output: Optional[OutputFormat] = OutputOpt,
    json_output: bool = JsonAliasOpt,
    kafka_bootstrap: Optional[str] = KafkaOpt,
) -> int:
    from postbox.incident.offsets import apply_reset, plan_reset, reset_audit, write_plan_file

    fmt = output_format(output, json_output)
    if execute and dry_run:
        raise typer.BadParameter("--execute and --dry-run contradict each other", param_hint="--execute")
    target = _target(to, shift_by, to_current, from_file)
    ttl = resolve_ttl(marker_ttl)
    safety = duration(margin, "--safety-margin") or timedelta(0)
    settings = settings_for(kafka_bootstrap=kafka_bootstrap)
    with kafka_for(settings) as kafka:
        kafka.ping()
        for t in [*(topic or []), *target.topics()]:
            kafka.require_topic(t)
        plan = plan_reset(kafka, group, target, topics=list(topic or []) or None, partition=partition,
                          marker_ttl=ttl, margin=safety, force=force)
        if export is not None:
            write_plan_file(plan, export)
        audit_entry = None
        if execute and not plan.refused:
            confirm(f"reset group {group} to {target.describe()} on {len(plan.moves)} partition(s)?", yes)
            apply_reset(kafka, plan)
            audit_entry = write_audit(kafka, reset_audit(plan, force))
    applied = execute and not plan.refused
    if fmt is OutputFormat.json:
        print_json({**plan.as_dict(), "dry_run": not execute, "applied": applied, "audit": audit_entry,
                    "exported_to": str(export) if export else None})
    else:
        _print_plan(plan, fmt, applied=applied, audited=audit_entry is not None, export=export)
    if plan.refused:
        raise UnsafeReplayError(f"refused to reset {group}: {plan.problems[0]}", fix="pass --force if that is what you want")
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

