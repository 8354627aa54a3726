"""Outbox retention that runs outside the application's transactions (`postbox db retention`).

Partition retention (the default policy): keep partitions ahead of the clock, drop partitions
whose whole range is older than the keep period, and delete old rows from the default partition
in small batches.

Never the last copy of an unpublished event: Debezium reads events from the WAL, but if the
replication slot is lost (``max_slot_wal_keep_size`` exceeded during a long Connect outage) the
table is the only place left to republish them from (docs/recovery.md). So a run refuses to drop
or purge anything while the slot is missing, lost or about to be, and otherwise drops only rows
the slot has confirmed: each run records a checkpoint (WAL insert position + oldest running
transaction, ``035_retention_checkpoints.sql``), and a partition goes only when every row in it was
written by a transaction older than a checkpoint whose position the slot has confirmed (checked
under the partition's lock, so nothing can be inserted between the check and the DROP). A
checkpoint counts only for the slot that was there when it was taken: a slot dropped and created
again is past every old checkpoint without having streamed the rows before it, so checkpoints
carry the slot's stamp (``slot_identity.py``) and a slot without it holds retention.

Safe from cron: one run at a time (advisory lock; a second run reports and exits 0), every lock
on the outbox is bounded by ``lock_timeout`` and retried, so emits are never stalled longer than
that, and an interrupted run leaves nothing a later run cannot finish.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql

from postbox.errors import RetentionError
from postbox.redelivery import human
from postbox.pipelines import DEFAULT, Pipeline
from postbox.outbox.slot_identity import check_slot, confirmed_checkpoint, hold, record_checkpoint
from postbox.outbox.slot_identity import trust_slot as vouch_for_slot
from postbox.slot import LOSS_STATES, read_slot

#: The default pipeline's advisory-lock key (each pipeline's: :attr:`Pipeline.retention_lock`).
LOCK_KEY = DEFAULT.retention_lock
DEFAULT_KEEP = timedelta(days=2)
DEFAULT_WIDTH = timedelta(days=1)
DEFAULT_AHEAD = timedelta(days=7)
DEFAULT_CONFIRM_WAIT = timedelta(seconds=30)


@dataclass
class RetentionReport:
    """What one run did (lines for people, fields for --json)."""

    created: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    refused: str | None = None
    purged_default_rows: int = 0
    locked_out: bool = False
    dry_run: bool = False
    partitions: list[dict[str, Any]] = field(default_factory=list)
    slot: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "created": self.created,
            "dropped": self.dropped,
            "skipped": self.skipped,
            "kept": self.kept,
            "refused": self.refused,
            "slot": {k: v for k, v in self.slot.items() if k != "database"},
            "purged_default_rows": self.purged_default_rows,
            "locked_out": self.locked_out,
            "dry_run": self.dry_run,
            "partitions": self.partitions,
        }


def list_partitions(conn: psycopg.Connection[Any], pipeline: Pipeline = DEFAULT) -> list[dict[str, Any]]:
    """The partitions of ``pipeline``'s outbox with their time ranges and estimated row counts, oldest first."""
    rows = conn.execute(pipeline.sql(
        """SELECT p.partition, p.lower_time, p.upper_time, p.is_default, p.detach_pending,
                  greatest(c.reltuples, 0)::bigint AS estimated_rows, pg_total_relation_size(c.oid) AS bytes
             FROM {schema}.outbox_partitions p
             JOIN pg_class c ON c.relname = p.partition
             JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = '{schema}'
            ORDER BY p.is_default, p.lower_time"""
    )).fetchall()
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
    slot_name: str | None = None,
    confirm_wait: timedelta = DEFAULT_CONFIRM_WAIT,
    progress: Callable[[str], None] | None = None,
    pipeline: Pipeline | str | None = None,
    trust_slot: bool = False,
) -> RetentionReport:
    """One retention pass over ``pipeline``'s outbox as the maintenance role (it must be a member
    of postbox_owner). ``pipeline``: default ``POSTBOX_PIPELINE``, else the default pipeline; its
    replication slot decides what may go (``slot_name`` names another one).

    ``confirm_wait``: how long to wait for the slot to confirm this run's checkpoint (the connector
    confirms within its heartbeat interval); without it a run drops up to the previous run's.
    ``trust_slot``: the operator vouches that the slot survived a crash that discarded its stamp
    (:func:`postbox.outbox.slot_identity.trust_slot`); refused with ``dry_run``.
    """
    if keep < timedelta(minutes=1):
        raise RetentionError(f"keep period {human(keep)} is too short", fix="keep rows at least a few minutes (e.g. --keep 2d)")
    if trust_slot and dry_run:
        raise RetentionError("--trust-slot stamps the slot and releases a hold: it cannot be part of a dry run",
                             fix="run it without --dry-run")
    chosen = Pipeline.parse(pipeline)
    run = _Run(RetentionReport(dry_run=dry_run), chosen, attempts, trust_slot)
    report = run.report
    with owner_connection(conninfo, "for retention", chosen) as conn:
        conn.execute(sql.SQL("SET lock_timeout = {}").format(sql.Literal(f"{int(lock_timeout.total_seconds() * 1000)}ms")))
        got = conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (chosen.retention_lock,)).fetchone()
        if not got or not got[0]:
            report.locked_out = True
            return report
        try:
            horizon = _confirmed_horizon(conn, run, slot_name or chosen.slot, confirm_wait, progress)
            _finish_interrupted(conn, run, horizon)
            _ensure_ahead(conn, run, width, ahead)
            if horizon is not None:
                _drop_old(conn, run, keep, horizon)
                if not dry_run:
                    _purge_default(conn, run, keep, batch, horizon)
            report.partitions = list_partitions(conn, chosen)
        finally:
            conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (chosen.retention_lock,))
    return report


@dataclass
class _Run:
    """What every step of one run shares: its report, the pipeline whose outbox it keeps, and how
    many times a step retries a lock."""

    report: RetentionReport
    pipeline: Pipeline
    attempts: int
    trust_slot: bool = False

    @property
    def dry_run(self) -> bool:
        return self.report.dry_run

    def sql(self, text: str) -> str:
        return self.pipeline.sql(text)


def _ensure_ahead(conn: psycopg.Connection[Any], run: _Run, width: timedelta, ahead: timedelta) -> None:
    report = run.report
    if run.dry_run:
        report.created.append(f"(dry run) would ensure partitions {human(width)} wide up to {human(ahead)} ahead")
        return
    ensure = run.sql("SELECT {schema}.outbox_ensure_partitions(%s, %s)")
    for line in _retry(run.attempts, lambda: [r[0] for r in conn.execute(ensure, (width, ahead)).fetchall()]):
        (report.skipped if line.startswith("skipped") else report.created).append(line)


def _confirmed_horizon(conn: psycopg.Connection[Any], run: _Run, slot_name: str,
                       confirm_wait: timedelta, progress: Callable[[str], None] | None = None) -> str | None:
    """The oldest_xid of the newest checkpoint the slot has confirmed; None (and why) when none is.

    Records this run's checkpoint first (not in a dry run) and waits up to ``confirm_wait`` for
    the slot to pass it. Only checkpoints recorded with the slot's current stamp count
    (:mod:`postbox.outbox.slot_identity`): a replaced slot holds retention like a missing one.
    Older checkpoints than the one returned are no longer needed.
    """
    report = run.report
    slot = read_slot(conn, slot_name)
    report.slot = slot
    problem = _slot_problem(slot, slot_name, conn.info.dbname)
    if problem is not None:
        report.refused = problem
        if not report.dry_run:
            hold(conn, run.pipeline, problem)
        return None
    if run.trust_slot:
        vouch_for_slot(conn, run.pipeline, slot_name)
    held = conn.execute(run.sql("SELECT since, reason FROM {schema}.retention_holds ORDER BY since LIMIT 1")).fetchone()
    if held is not None:
        report.refused = (f"retention is on hold since {held[0]:%Y-%m-%d %H:%M:%S %Z}: {held[1]}. Once the rows are "
                          f"republished (`postbox db republish{run.pipeline.flag}`, docs/recovery.md) the hold is released")
        return None
    check = check_slot(conn, run.pipeline, slot_name, dry_run=report.dry_run)
    if check.stamp is None:
        report.refused = check.refused
        if check.hold and not report.dry_run:
            hold(conn, run.pipeline, check.refused or "", check.hold)
        return None
    if not report.dry_run:
        _await_confirmation(conn, slot_name, record_checkpoint(conn, run.pipeline, check.stamp), confirm_wait, progress)
    row = confirmed_checkpoint(conn, run.pipeline, slot_name, check.stamp)
    if row is None:
        report.refused = (f"the replication slot {slot_name} has not yet confirmed any retention checkpoint "
                          f"(confirmed up to {read_slot(conn, slot_name).get('confirmed_flush_lsn')}): rows may not have "
                          "reached Kafka, nothing was dropped; the next run can drop what the slot has confirmed by then")
        return None
    if not report.dry_run:
        conn.execute(run.sql("DELETE FROM {schema}.retention_checkpoints WHERE taken_at < %s"), (row[0],))
    return row[1]


def _await_confirmation(conn: psycopg.Connection[Any], slot_name: str, lsn: str, confirm_wait: timedelta,
                        progress: Callable[[str], None] | None) -> None:
    """Wait up to ``confirm_wait`` for the slot to pass this run's checkpoint at ``lsn``."""
    started = time.monotonic()
    shown = 0.0
    while not _slot_passed(conn, slot_name, lsn) and time.monotonic() - started < confirm_wait.total_seconds():
        elapsed = time.monotonic() - started
        if progress is not None and elapsed - shown >= 2:
            shown = elapsed
            progress(f"waiting for replication slot {slot_name} to confirm this run's checkpoint {lsn}… {elapsed:.0f}s")
        time.sleep(0.5)


def _slot_problem(slot: dict[str, Any], slot_name: str, dbname: str) -> str | None:
    """Why no row may be dropped now because of the slot's state, or None."""
    why = "rows in the outbox may be the last copy of events the connector never published"
    if slot["state"] == "missing" or slot.get("database") != dbname:
        return (f"replication slot {slot_name} does not exist in database {dbname!r}: {why}; nothing was dropped "
                "(register the connector; after a lost slot follow docs/recovery.md)")
    if slot.get("wal_status") in LOSS_STATES:
        return (f"replication slot {slot_name} is {slot['wal_status']} (it can no longer stream the WAL it needed): "
                f"{why}; nothing was dropped until they are republished (docs/recovery.md)")
    return None


def _slot_passed(conn: psycopg.Connection[Any], slot_name: str, lsn: str) -> bool:
    row = conn.execute(
        "SELECT confirmed_flush_lsn >= %s::pg_lsn FROM pg_replication_slots WHERE slot_name = %s", (lsn, slot_name)
    ).fetchone()
    return bool(row and row[0])


def _drop_old(conn: psycopg.Connection[Any], run: _Run, keep: timedelta, horizon: str) -> None:
    report, schema = run.report, run.pipeline.schema
    old = conn.execute(run.sql(
        """SELECT partition FROM {schema}.outbox_partitions
            WHERE NOT is_default AND NOT detach_pending AND upper_time <= now() - %s
            ORDER BY lower_time"""),
        (keep,),
    ).fetchall()
    for (name,) in old:
        unconfirmed = _retry(run.attempts, lambda n=name: _drop_if_confirmed(conn, run, n, horizon))
        if unconfirmed:
            report.kept.append(f"kept partition {schema}.{name}: {unconfirmed} row(s) written after the newest "
                               "retention checkpoint the replication slot has confirmed (they may not be in Kafka yet)")
        elif run.dry_run:
            report.dropped.append(f"(dry run) would drop {schema}.{name}")
        else:
            report.dropped.append(f"dropped partition {schema}.{name}")


def _drop_if_confirmed(conn: psycopg.Connection[Any], run: _Run, name: str, horizon: str) -> int:
    """Drop ``name`` unless it holds rows the slot has not confirmed; returns how many it holds.

    Under ACCESS EXCLUSIVE on the partition (which the DROP takes anyway), so no insert can land
    between the check and the drop. The check reads the partition once (a sequential scan).
    """
    table = sql.Identifier(run.pipeline.schema, name)
    with conn.transaction():
        if not run.dry_run:
            conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(table))
        unconfirmed = conn.execute(
            sql.SQL(run.sql("SELECT count(*) FROM {} WHERE NOT {schema}.xid_precedes(xmin, %s::xid8)")).format(table),
            (horizon,),
        ).fetchone()[0]  # type: ignore[index]
        if not unconfirmed and not run.dry_run:
            conn.execute(sql.SQL("DROP TABLE {}").format(table))
    return int(unconfirmed)


def _purge_default(conn: psycopg.Connection[Any], run: _Run, keep: timedelta, batch: int, horizon: str) -> None:
    purge = run.sql("SELECT {schema}.outbox_purge_default(now() - %s, %s, %s::xid8)")
    while True:
        n = _retry(run.attempts, lambda: conn.execute(purge, (keep, batch, horizon)).fetchone()[0])  # type: ignore[index]
        run.report.purged_default_rows += int(n)
        if n < batch:
            break


def owner_connection(conninfo: str, purpose: str, pipeline: Pipeline = DEFAULT) -> psycopg.Connection[Any]:
    """An autocommit connection acting as postbox_owner (:func:`become_owner`), for maintenance of
    ``pipeline``'s outbox; a RetentionError with the fix when it cannot connect. ``purpose``
    completes "cannot connect"."""
    try:
        conn = psycopg.connect(conninfo, autocommit=True)
    except psycopg.OperationalError as exc:
        raise RetentionError(f"cannot connect {purpose}: {exc}".strip(), fix="check --url / POSTBOX_MAINT_DATABASE_URL") from exc
    try:
        become_owner(conn, pipeline)
    except BaseException:
        conn.close()
        raise
    return conn


def become_owner(conn: psycopg.Connection[Any], pipeline: Pipeline = DEFAULT) -> None:
    """``SET ROLE postbox_owner`` (partition maintenance, republish and `db status` act as the
    outbox's owner); a RetentionError with the fix when the role or ``pipeline``'s outbox is missing."""
    try:
        conn.execute("SET ROLE postbox_owner")
    except psycopg.errors.InsufficientPrivilege as exc:
        raise RetentionError(
            f"role {conn.info.user!r} cannot act as postbox_owner, which partition maintenance needs",
            fix="connect as postbox_maint (created by `postbox db init`)",
        ) from exc
    except psycopg.errors.InvalidParameterValue as exc:
        raise RetentionError("role postbox_owner does not exist in this cluster", fix=f"run `postbox db init{pipeline.flag}` first") from exc
    exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (pipeline.table,)).fetchone()
    if not exists or not exists[0]:
        raise RetentionError(f"no {pipeline.table} in database {conn.info.dbname!r}: pipeline {pipeline.name} is not set up there",
                             fix=f"run `postbox db init{pipeline.flag}` first, or name the pipeline this database holds (--pipeline)")


def _finish_interrupted(conn: psycopg.Connection[Any], run: _Run, horizon: str | None) -> None:
    """Complete what an interrupted run (or a manual DETACH CONCURRENTLY) left behind."""
    report, schema = run.report, run.pipeline.schema
    pending = conn.execute(run.sql("SELECT partition FROM {schema}.outbox_partitions WHERE detach_pending")).fetchall()
    for (name,) in pending:
        if not run.dry_run:
            _retry(run.attempts, lambda n=name: conn.execute(
                sql.SQL(run.sql("ALTER TABLE {schema}.outbox DETACH PARTITION {} FINALIZE")).format(sql.Identifier(schema, n))
            ))
        report.dropped.append(f"finalized pending detach of {schema}.{name}")
    orphans = conn.execute(
        r"""SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = %s AND c.relkind = 'r' AND c.relname ~ '^outbox_p[0-9]{8}t[0-9]{6}$'
               AND NOT EXISTS (SELECT FROM pg_inherits i WHERE i.inhrelid = c.oid)""",
        (schema,),
    ).fetchall()
    for (name,) in orphans:
        # Made by an ensure that failed between CREATE and ATTACH, or detached and not dropped:
        # a detached partition's rows are as unpublished as an attached one's.
        if horizon is None:
            report.kept.append(f"kept unattached table {schema}.{name}: {report.refused}")
            continue
        unconfirmed = _drop_if_confirmed(conn, run, name, horizon)
        if unconfirmed:
            report.kept.append(f"kept unattached table {schema}.{name}: {unconfirmed} row(s) not yet confirmed by the slot")
        else:
            report.dropped.append(f"dropped unattached table {schema}.{name}")


def _retry(attempts: int, action: Any) -> Any:
    """Run ``action``; on lock_timeout, back off and try again (emits get the lock in between)."""
    for attempt in range(1, attempts + 1):
        try:
            return action()
        except psycopg.errors.LockNotAvailable as exc:
            if attempt == attempts:
                raise RetentionError(
                    f"could not lock the outbox within lock_timeout after {attempts} attempts ({exc.diag.message_primary})",
                    fix="a long transaction holds the outbox; retry later (cron will) or raise --lock-timeout",
                ) from exc
            time.sleep(min(0.2 * 2**attempt, 5.0))
    raise AssertionError("unreachable")
