"""`postbox db`: set up the outbox in a database, and run its retention (from cron)."""

from __future__ import annotations

from datetime import timedelta
from typing import Optional

import typer

from postbox.cli.incident_common import PipelineOpt, duration, pipeline_for
from postbox.cli.output import Listing, OutputFormat, OutputOpt, console, err_console, output_format, print_json, print_listing
from postbox.errors import ConfigError
from postbox.secret_env import env_value

db_app = typer.Typer(help="The outbox in PostgreSQL: setup, grants and retention.", no_args_is_help=True)

ADMIN_ENV = "POSTBOX_ADMIN_DATABASE_URL"
MAINT_ENV = "POSTBOX_MAINT_DATABASE_URL"


def _maint_url(url: Optional[str]) -> str:
    """--url, else POSTBOX_MAINT_DATABASE_URL, else the local stack's postbox_maint (its PostgreSQL
    port and the password `postbox up` generated); never a guessed server."""
    from postbox.cli.client_options import local_stack_env

    chosen = url or env_value(MAINT_ENV) or local_stack_env().get(MAINT_ENV)
    if not chosen:
        raise ConfigError(
            f"no maintenance database URL: --url is not given, {MAINT_ENV} is not set and there is no local stack here",
            fix=f"set {MAINT_ENV}=postgresql://postbox_maint:<password>@<host>:<port>/<database> (or pass --url)",
        )
    return chosen


def _positive(text: str, option: str) -> timedelta:
    """A duration flag (postbox.durations: ``90s``, ``15m``, ``2d``, ``500ms``, bare seconds),
    more than zero; a usage error naming the flag otherwise."""
    value = duration(text, option)
    if value is None or value <= timedelta(0):
        raise typer.BadParameter(f"{text!r} is not a duration above zero, e.g. 2s, 15m, 2d", param_hint=option)
    return value


@db_app.command("init")
def init(
    admin_url: Optional[str] = typer.Option(None, "--admin-url", help=f"superuser or database-owner URL (env {ADMIN_ENV})"),
    retention: Optional[str] = typer.Option(None, "--retention", help="partitions (default) or delete; sets the app's grants"),
    width: str = typer.Option("1d", "--partition-width", help="time span of one outbox partition (e.g. 1d, 12h)"),
    ahead: str = typer.Option("7d", "--ahead", help="create partitions this far ahead of now"),
    pipeline: Optional[str] = PipelineOpt,
    as_json: bool = typer.Option(False, "--json", help="print what changed as JSON"),
) -> int:
    """Create or update roles, the outbox table, partitions, publication and grants (idempotent).

    Passwords come from POSTBOX_APP_PASSWORD, POSTBOX_CDC_PASSWORD and POSTBOX_MAINT_PASSWORD;
    an unset one leaves that role's password unchanged. With --pipeline, the pipeline's own
    schema and publication (several services' outboxes in one cluster or database).
    """
    from postbox.db import PASSWORD_ENV, init_database

    url = admin_url or env_value(ADMIN_ENV)
    if not url:
        raise typer.BadParameter(f"no admin database URL: pass --admin-url or set {ADMIN_ENV}", param_hint="--admin-url")
    lines = init_database(
        url,
        app_password=env_value(PASSWORD_ENV["postbox_app"]),
        cdc_password=env_value(PASSWORD_ENV["postbox_cdc"]),
        maint_password=env_value(PASSWORD_ENV["postbox_maint"]),
        retention=retention,
        partition_width=_positive(width, "--partition-width"),
        partitions_ahead=_positive(ahead, "--ahead"),
        pipeline=pipeline_for(pipeline),
    )
    _print_changes(lines, as_json)
    return 0


def _print_changes(lines: list[str], as_json: bool) -> None:
    """What `db init` / `db grant` changed: one bullet per line, or ``{"changes": [...]}``."""
    if as_json:
        print_json({"changes": lines})
    else:
        for line in lines:
            console.print(f"• {line}", highlight=False)


@db_app.command("grant")
def grant(
    role: str = typer.Option(..., "--role", help="the existing role your service logs in as"),
    admin_url: Optional[str] = typer.Option(None, "--admin-url", help=f"superuser or postbox_owner member URL (env {ADMIN_ENV})"),
    pipeline: Optional[str] = PipelineOpt,
    as_json: bool = typer.Option(False, "--json", help="print what changed as JSON"),
) -> int:
    """Let an existing role insert outbox rows and nothing more (what postbox_app has; idempotent).

    For services that log in with their own role. The SQL is postbox/sql/roles/grant_writer.sql,
    for people who apply their own migrations (docs/writer.md).
    """
    from postbox.db_roles import grant_writer

    url = admin_url or env_value(ADMIN_ENV)
    if not url:
        raise typer.BadParameter(f"no admin database URL: pass --admin-url or set {ADMIN_ENV}", param_hint="--admin-url")
    lines = grant_writer(url, role, pipeline_for(pipeline))
    _print_changes(lines, as_json)
    return 0


@db_app.command("retention")
def retention(
    url: Optional[str] = typer.Option(None, "--url", help=f"postbox_maint URL (env {MAINT_ENV}; default: local stack)"),
    keep: str = typer.Option("2d", "--keep", help="keep outbox rows at least this long (e.g. 2d, 36h, 172800 seconds)"),
    width: str = typer.Option("1d", "--partition-width", help="time span of new partitions"),
    ahead: str = typer.Option("7d", "--ahead", help="keep partitions this far ahead of now"),
    lock_timeout: str = typer.Option("2s", "--lock-timeout", help="longest an emit may wait behind this run (e.g. 2s, 500ms, 1m)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="say what would be dropped; change nothing"),
    trust_slot: bool = typer.Option(False, "--trust-slot", help="vouch that the replication slot survived a crash that discarded its stamp (docs/recovery.md)"),
    pipeline: Optional[str] = PipelineOpt,
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
) -> int:
    """Drop expired outbox partitions, create upcoming ones, purge the default partition. Cron-safe."""
    from postbox.outbox.retention import run_retention

    chosen = pipeline_for(pipeline)
    report = run_retention(
        _maint_url(url),
        keep=_positive(keep, "--keep"),
        width=_positive(width, "--partition-width"),
        ahead=_positive(ahead, "--ahead"),
        lock_timeout=_positive(lock_timeout, "--lock-timeout"),
        dry_run=dry_run,
        progress=lambda line: err_console.print(f"… {line}", highlight=False),
        pipeline=chosen,
        trust_slot=trust_slot,
    )
    if as_json:
        print_json(report.as_dict())
        return 0
    if report.locked_out:
        console.print("another retention run holds the lock; nothing done", highlight=False)
        return 0
    for line in report.created + report.dropped + report.skipped + report.kept:
        console.print(f"• {line}", highlight=False)
    if report.refused:
        console.print(f"• dropped nothing: {report.refused}", highlight=False)
    console.print(f"• purged {report.purged_default_rows} old row(s) from the default partition", highlight=False)
    _print_partitions(report.partitions, output_format(None), chosen.table)
    return 0


@db_app.command("republish")
def republish_cmd(
    url: Optional[str] = typer.Option(None, "--url", help=f"postbox_maint URL (env {MAINT_ENV}; default: local stack)"),
    since: Optional[str] = typer.Option(None, "--since", help="only rows created at or after this ISO time (default: every row)"),
    batch: int = typer.Option(1000, "--batch", help="rows per transaction"),
    pipeline: Optional[str] = PipelineOpt,
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
) -> int:
    """Publish the outbox rows still in the table again (recovery after a lost slot: docs/recovery.md)."""
    from datetime import datetime

    from postbox.outbox.republish import republish

    try:
        start = datetime.fromisoformat(since.replace("Z", "+00:00")) if since else None
    except ValueError:
        raise typer.BadParameter(f"{since!r} is not an ISO time, e.g. 2024-05-06T07:00:00Z", param_hint="--since") from None
    report = republish(_maint_url(url), since=start, batch=batch, pipeline=pipeline_for(pipeline))
    if as_json:
        print_json(report.as_dict())
        return 0
    console.print(f"• republished {report.republished} row(s)" + (f" ({report.first_id} .. {report.last_id})" if report.republished else ""),
                  highlight=False)
    if report.skipped_undeliverable:
        console.print(f"• left {report.skipped_undeliverable} undeliverable row(s) alone (`postbox doctor` names them)", highlight=False)
    if report.released_holds:
        console.print("• released the retention hold", highlight=False)
    return 0


@db_app.command("status")
def status(
    url: Optional[str] = typer.Option(None, "--url", help=f"postbox_maint URL (env {MAINT_ENV}; default: local stack)"),
    pipeline: Optional[str] = PipelineOpt,
    as_json: bool = typer.Option(False, "--json", help="print the partitions as JSON"),
    output: Optional[OutputFormat] = OutputOpt,
) -> int:
    """The outbox's partitions, their time ranges and sizes."""
    import psycopg

    from postbox.outbox.retention import become_owner, list_partitions

    target = _maint_url(url)
    chosen = pipeline_for(pipeline)
    try:
        with psycopg.connect(target, autocommit=True) as conn:
            become_owner(conn, chosen)
            parts = list_partitions(conn, chosen)
    except psycopg.OperationalError as exc:
        from postbox.errors import OutboxError
        from postbox.settings import redact_url

        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise OutboxError(f"cannot read the outbox partitions at {redact_url(target)}: {reason}",
                          fix=f"check the database is up and the URL (--url, {MAINT_ENV})") from None
    fmt = output_format(output, as_json)
    if fmt is OutputFormat.json:
        print_json(parts)
    else:
        _print_partitions(parts, fmt, chosen.table)
    return 0


def _print_partitions(parts: list[dict], fmt: OutputFormat, table: str) -> None:
    """A table on a terminal, TSV with whole partition names when piped (pasteable into psql)."""
    listing = Listing(f"{table} partitions", ("partition", "from", "to", "rows (est.)", "size"), right=("rows (est.)", "size"))
    for p in parts:
        listing.add(
            p["partition"],
            "default" if p["is_default"] else str(p["lower_time"]),
            "" if p["is_default"] else str(p["upper_time"]),
            p["estimated_rows"],
            f"{p['bytes'] // 1024} KiB",
        )
    print_listing(listing, fmt)


def register(app: typer.Typer) -> None:
    app.add_typer(db_app, name="db")
