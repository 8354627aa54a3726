"""`postbox replay --group G --to …`: move a stopped group's committed offsets (re-consume)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from postbox.cli.client_options import kafka_client_options
from postbox.cli.incident_common import (
    JsonOpt,
    KafkaOpt,
    TtlOpt,
    YesOpt,
    confirm,
    duration,
    kafka_for,
    marker_ttl as resolve_ttl,
    number,
    settings_for,
    write_audit,
)
from postbox.cli.output import console, print_json
from postbox.errors import UnsafeReplayError


def register(app: typer.Typer) -> None:
    app.command("replay", help="Reset a stopped group's offsets to earliest, an offset or a time (re-consume).")(replay)


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
    from postbox.incident.offsets import apply_reset, parse_target, plan_reset, reset_audit

    try:
        target = parse_target(to)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--to") from None
    ttl = resolve_ttl(marker_ttl)
    safety = duration(margin, "--safety-margin") or timedelta(0)
    settings = settings_for(kafka_bootstrap=kafka_bootstrap)
    with kafka_for(settings) as kafka:
        kafka.ping()
        for t in topic or []:
            kafka.require_topic(t)
        plan = plan_reset(kafka, group, target, topics=list(topic or []) or None, partition=partition,
                          marker_ttl=ttl, margin=safety, force=force)
        applied = False
        audit_entry = None
        if not dry_run and not plan.refused:
            confirm(f"reset group {group} to {target.describe()} on {len(plan.moves)} partition(s)?", yes)
            apply_reset(kafka, plan)
            applied = True
            audit_entry = write_audit(kafka, reset_audit(plan, force))
    if json_output:
        print_json({**plan.as_dict(), "dry_run": dry_run, "applied": applied, "audit": audit_entry})
    else:
        _print_plan(plan, applied=applied, dry_run=dry_run, audited=audit_entry is not None)
    if plan.refused:
        raise UnsafeReplayError(f"refused to reset {group}: {plan.problems[0]}", fix="pass --force if that is what you want")
    return 0 if (applied or dry_run) and (not applied or audit_entry is not None) else 1


def _print_plan(plan: Any, *, applied: bool, dry_run: bool, audited: bool) -> None:
    table = Table(title=f"{'plan: ' if not applied else ''}reset {plan.group} to {plan.target.describe()}")
    for col in ("topic", "p", "current", "new", "re-consumed", "skipped", "oldest re-consumed"):
        table.add_column(col)
    for m in plan.moves:
        d = m.as_dict()
        table.add_row(m.topic, str(m.partition), number(m.current), number(m.new), number(d["reconsumed"]), number(d["skipped"]),
                      d["oldest_reconsumed_at"] or "")
    console.print(table)
    for p in plan.problems:
        console.print(f"[yellow]warning:[/] {escape(p)}", highlight=False)
    if applied:
        console.print(f"[green]offsets of {plan.group} reset[/]; start its consumers to re-consume" + ("; audit record written" if audited else ""))
    elif dry_run:
        console.print("dry run: nothing changed")
