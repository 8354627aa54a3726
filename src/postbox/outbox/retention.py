"""Outbox retention that runs outside the application's transactions (`postbox db retention`).

Partition retention (the default policy): keep partitions ahead of the clock, drop partitions
whose whole range is older than the keep period, and delete old rows from the default partition
in small batches. Dropping is safe for delivery whether or not Debezium has caught up: Debezium
reads events from the WAL, never from the table, and the replication slot retains that WAL (and
the catalog rows needed to decode it) until the connector confirms it.

Safe from cron: one run at a time (advisory lock; a second run reports and exits 0), every lock
on the outbox is bounded by ``lock_timeout`` and retried, so emits are never stalled longer than
that, and an interrupted run leaves nothing a later run cannot finish.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql

from postbox.errors import RetentionError

LOCK_KEY = "postbox.outbox.retention"
DEFAULT_KEEP = timedelta(days=2)
DEFAULT_WIDTH = timedelta(days=1)
DEFAULT_AHEAD = timedelta(days=7)


@dataclass
class RetentionReport:
    """What one run did (lines for people, fields for --json)."""

    created: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    purged_default_rows: int = 0
    locked_out: bool = False
    dry_run: bool = False
    partitions: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "created": self.created,
            "dropped": self.dropped,
            "skipped": self.skipped,
            "purged_default_rows": self.purged_default_rows,
            "locked_out": self.locked_out,
            "dry_run": self.dry_run,
            "partitions": self.partitions,
        }


def parse_duration(text: str) -> timedelta:
    """``90m``, ``6h``, ``2d``, ``1w`` → timedelta (ConfigError-like RetentionError otherwise)."""
    units = {"m": 60, "h": 3600, "d": 86400, "w": 604800}
    text = text.strip().lower()
    if len(text) >= 2 and text[-1] in units and text[:-1].isdigit() and int(text[:-1]) > 0:
        return timedelta(seconds=int(text[:-1]) * units[text[-1]])
    raise RetentionError(f"duration {text!r} is not a positive number followed by m, h, d or w", fix="e.g. 2d or 6h")


def list_partitions(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    """The outbox's partitions with their time ranges and estimated row counts, oldest first."""
    rows = conn.execute(
        """SELECT p.partition, p.lower_time, p.upper_time, p.is_default, p.detach_pending,
                  greatest(c.reltuples, 0)::bigint AS estimated_rows, pg_total_relation_size(c.oid) AS bytes
             FROM postbox.outbox_partitions p
             JOIN pg_class c ON c.relname = p.partition
             JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'postbox'
            ORDER BY p.is_default, p.lower_time"""
    ).fetchall()
    names = ["partition", "lower_time", "upper_time", "is_default", "detach_pending", "estimated_rows", "bytes"]
    return [dict(zip(names, r)) for r in rows]


def run_retention(
    conninfo: str,
    *,
    keep: timedelta = DEFAULT_KEEP,
    width: timedelta = DEFAULT_WIDTH,
    ahead: timedelta = DEFAULT_AHEAD,
    batch: int = 5000,
    lock_timeout: timedelta = timedelta(seconds=2),
    attempts: int = 5,
    dry_run: bool = False,
) -> RetentionReport:
    """One retention pass as the maintenance role (it must be a member of postbox_owner)."""
    if keep < timedelta(minutes=1):
        raise RetentionError(f"keep period {keep} is too short", fix="keep rows at least a few minutes (e.g. --keep 2d)")
    report = RetentionReport(dry_run=dry_run)
    try:
        conn = psycopg.connect(conninfo, autocommit=True)
    except psycopg.OperationalError as exc:
        raise RetentionError(f"cannot connect for retention: {exc}".strip(), fix="check --url / POSTBOX_MAINT_DATABASE_URL") from exc
    with conn:
        _become_owner(conn)
        conn.execute(sql.SQL("SET lock_timeout = {}").format(sql.Literal(f"{int(lock_timeout.total_seconds() * 1000)}ms")))
        got = conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (LOCK_KEY,)).fetchone()
        if not got or not got[0]:
            report.locked_out = True
            return report
        try:
            _finish_interrupted(conn, report, dry_run, attempts)
            if dry_run:
                report.created.append(f"(dry run) would ensure partitions {width} wide up to {ahead} ahead")
            else:
                for line in _retry(attempts, lambda: [
                    r[0] for r in conn.execute(
                        "SELECT postbox.outbox_ensure_partitions(%s, %s)", (width, ahead)
                    ).fetchall()
                ]):
                    (report.skipped if line.startswith("skipped") else report.created).append(line)
            old = conn.execute(
                """SELECT partition FROM postbox.outbox_partitions
                    WHERE NOT is_default AND NOT detach_pending AND upper_time <= now() - %s
                    ORDER BY lower_time""",
                (keep,),
            ).fetchall()
            for (name,) in old:
                if dry_run:
                    report.dropped.append(f"(dry run) would drop postbox.{name}")
                    continue
                _retry(attempts, lambda n=name: conn.execute(sql.SQL("DROP TABLE postbox.{}").format(sql.Identifier(n))))
                report.dropped.append(f"dropped partition postbox.{name}")
            if not dry_run:
                while True:
                    n = _retry(attempts, lambda: conn.execute(
                        "SELECT postbox.outbox_purge_default(now() - %s, %s)", (keep, batch)
                    ).fetchone()[0])  # type: ignore[index]
                    report.purged_default_rows += int(n)
                    if n < batch:
                        break
            report.partitions = list_partitions(conn)
        finally:
            conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (LOCK_KEY,))
    return report


def _become_owner(conn: psycopg.Connection[Any]) -> None:
    try:
        conn.execute("SET ROLE postbox_owner")
    except psycopg.errors.InsufficientPrivilege as exc:
        raise RetentionError(
            f"role {conn.info.user!r} cannot act as postbox_owner, which partition maintenance needs",
            fix="connect as postbox_maint (created by `postbox db init`)",
        ) from exc
    except psycopg.errors.InvalidParameterValue as exc:
        raise RetentionError("role postbox_owner does not exist in this cluster", fix="run `postbox db init` first") from exc
    exists = conn.execute("SELECT to_regclass('postbox.outbox') IS NOT NULL").fetchone()
    if not exists or not exists[0]:
        raise RetentionError(f"no postbox.outbox in database {conn.info.dbname!r}", fix="run `postbox db init` first")


def _finish_interrupted(conn: psycopg.Connection[Any], report: RetentionReport, dry_run: bool, attempts: int) -> None:
    """Complete what an interrupted run (or a manual DETACH CONCURRENTLY) left behind."""
    pending = conn.execute("SELECT partition FROM postbox.outbox_partitions WHERE detach_pending").fetchall()
    for (name,) in pending:
        if not dry_run:
            _retry(attempts, lambda n=name: conn.execute(
                sql.SQL("ALTER TABLE postbox.outbox DETACH PARTITION postbox.{} FINALIZE").format(sql.Identifier(n))
            ))
        report.dropped.append(f"finalized pending detach of postbox.{name}")
    orphans = conn.execute(
        r"""SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = 'postbox' AND c.relkind = 'r' AND c.relname ~ '^outbox_p[0-9]{8}t[0-9]{6}$'
               AND NOT EXISTS (SELECT FROM pg_inherits i WHERE i.inhrelid = c.oid)"""
    ).fetchall()
    for (name,) in orphans:
        if not dry_run:
            # Made by an ensure that failed between CREATE and ATTACH, or detached and not dropped.
            conn.execute(sql.SQL("DROP TABLE postbox.{}").format(sql.Identifier(name)))
        report.dropped.append(f"dropped unattached table postbox.{name}")


def _retry(attempts: int, action: Any) -> Any:
    """Run ``action``; on lock_timeout, back off and try again (emits get the lock in between)."""
    for attempt in range(1, attempts + 1):
        try:
            return action()
        except psycopg.errors.LockNotAvailable as exc:
            if attempt == attempts:
                raise RetentionError(
                    f"could not lock postbox.outbox within lock_timeout after {attempts} attempts ({exc.diag.message_primary})",
                    fix="a long transaction holds the outbox; retry later (cron will) or raise --lock-timeout",
                ) from exc
            time.sleep(min(0.2 * 2**attempt, 5.0))
    raise AssertionError("unreachable")
