"""`postbox reconcile --since T --until T`: did the window lose or double anything, hop by hop."""

from __future__ import annotations

from typing import Any, Optional

import typer

from postbox.cli.client_options import kafka_client_options, local_stack_env
from postbox.cli.incident_common import (
    KafkaOpt,
    PipelineOpt,
    RedisOpt,
    group_id,
    kafka_for,
    pipeline_for,
    progress,
    settings_for,
    time_point,
    write_audit,
)
from postbox.cli.output import JsonAliasOpt, Listing, OutputFormat, OutputOpt, note, output_format, print_json, print_listing


def register(app: typer.Typer) -> None:
    app.command("reconcile", help="Prove for a window that nothing was lost or doubled: outbox rows ↔ Kafka records ↔ each group's applies, with the fix per finding. Exit 0: every event proven; 1: something is missing; 3: nothing missing, but some events are unproven (marker gone: expired or evicted); 2: usage error.")(reconcile)  # fmt: skip


@kafka_client_options
def reconcile(
    since: str = typer.Option(..., "--since", help="Start of the window (events created at or after): ISO time or a duration ago (2h)."),
    until: Optional[str] = typer.Option(None, "--until", help="End of the window (exclusive): ISO time or a duration ago (default: now)."),
    aggregate_type: Optional[str] = typer.Option(None, "--aggregate-type", help="Only this aggregate type (its topic outbox.event.<type>)."),
    group: Optional[list[str]] = typer.Option(None, "--group", "-g", callback=group_id, metavar="GROUP", help="Only this consumer group (repeatable; default: every group with commits on the topics)."),
    database_url: Optional[str] = typer.Option(None, "--database-url", help="A role that may read the outbox (else POSTBOX_ADMIN_DATABASE_URL, POSTBOX_MAINT_DATABASE_URL, the local stack's postbox_maint)."),
    marker_ttl: Optional[str] = typer.Option(None, "--marker-ttl", help="Dedupe marker TTL (env POSTBOX_MARKER_TTL; default: each group's published TTL, else 8d)."),
    max_scan: int = typer.Option(5_000_000, "--max-scan", min=1, help="Read at most this many Kafka records (and as many dead letters); search markers under other routing keys only in a Redis of at most this many keys."),
    pipeline: Optional[str] = PipelineOpt,
    output: Optional[OutputFormat] = OutputOpt,
    json_output: bool = JsonAliasOpt,
    kafka_bootstrap: Optional[str] = KafkaOpt,
    redis_url: Optional[str] = RedisOpt,
) -> int:
    from datetime import datetime, timezone

    from postbox.incident.reconcile_run import ReconcileRequest, reconcile_audit, run_reconcile

    start = time_point(since, "--since")
    end = time_point(until, "--until") or datetime.now(timezone.utc)
    if start is None or start >= end:
        raise typer.BadParameter(f"the window is empty: --since {since} is not before --until {until or 'now'}", param_hint="--since")
    fmt = output_format(output, json_output)
    request = ReconcileRequest(
        start, end, aggregate_type=aggregate_type, groups=tuple(group or ()), marker_ttl_flag=marker_ttl, database_url=database_url,
        local_maint_url=local_stack_env().get("POSTBOX_MAINT_DATABASE_URL"), max_scan=max_scan, pipeline=pipeline_for(pipeline),
    )  # fmt: skip
    settings = settings_for(kafka_bootstrap=kafka_bootstrap, redis_url=redis_url)
    result = run_reconcile(request, settings, progress)
    with kafka_for(settings) as kafka:
        audit = write_audit(kafka, reconcile_audit(request, result))
    if fmt is OutputFormat.json:
        print_json({**result.as_dict(), "audit": audit})
    else:
        _print(result, fmt)
    return result.exit_code


def _print(result: Any, fmt: OutputFormat) -> None:
    """The summary per hop and per group, then one line per finding with its fix."""
    hops = Listing(f"reconcile {result.as_dict()['window']['since']} .. {result.as_dict()['window']['until']}",
                   ("hop", "events", "doubled", "missing", "detail"), right=("events", "doubled", "missing"))  # fmt: skip
    rows = "unreadable" if result.outbox_rows is None else result.outbox_rows
    hops.add("outbox", rows, None, None, f"oldest retained row {result.as_dict()['outbox']['oldest_retained'] or 'none'}")
    hops.add("kafka", result.published, result.doubled, result.missing_in_kafka,
             f"{result.records} record(s); {result.kafka_only} event(s) not in the outbox", style="red" if result.missing_in_kafka else None)  # fmt: skip
    print_listing(hops, fmt)
    groups = Listing("per group", ("group", "applied", "dead-lettered", "pending", "missing", "marker gone", "doubled, applied once"),
                     right=("applied", "dead-lettered", "pending", "missing", "marker gone", "doubled, applied once"))  # fmt: skip
    for g in result.groups:
        c = g.counts
        groups.add(g.group, c["applied"], c["dead-lettered"], c["pending"], c["missing"], c["unknown: marker gone"], g.doubled_applied_once,
                   style="red" if c["missing"] else ("yellow" if c["unknown: marker gone"] else None))  # fmt: skip
    print_listing(groups, fmt)
    if result.findings:
        found = Listing("findings", ("event id", "finding", "where", "last seen", "fix"))
        for f in result.findings:
            found.add(f.event_id, f.kind, f.hop, f.last_seen, f.fix or "", style="red" if f.kind == "missing" else None)
        print_listing(found, fmt)
    for line in result.notes:
        note(f"note: {line}", fmt)
    verdict = (f"{result.missing:,} event(s) missing" if result.missing else "nothing missing") + f" of {result.events:,} in the window"
    if result.unknown:
        verdict += f"; {result.unknown:,} group apply(ies) unproven (marker gone: check their effects, see the findings)"
    note(verdict, fmt)
