"""Which replication slot confirmed retention's checkpoints: the slot's identity.

Why a stamp: PostgreSQL 15 shows no creation time or id for a slot, and LSNs cannot tell a slot
dropped and created again under the same name from the old one. The new slot's
``confirmed_flush_lsn`` (its creation point) is past every older checkpoint, and any position it
shows is also one the old slot could have reached: the rows written between what the old slot
last confirmed and the new one's creation were never streamed, yet every checkpoint "is confirmed".

So retention marks the slot itself. A slot's statistics entry (``pg_stat_replication_slots``) is
created empty with the slot and dropped with it; ``pg_stat_reset_replication_slot`` sets its
``stats_reset`` to the current time. Retention stamps the slot once, records that stamp with every
checkpoint, and counts a checkpoint as confirmed only while the slot carries the same stamp. A
slot with another stamp (or none) is not the one that confirmed them: retention holds until the
rows are republished. Crash recovery, a failover and ``pg_upgrade`` discard the statistics too,
and a manual reset changes them: each reads as a replaced slot, the safe side (docs/recovery.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any

import psycopg

from postbox.outbox.sql_text import sql_text
from postbox.pipelines import Pipeline

STAMP_SQL = sql_text("slot_stamp.sql")
STAMP_SET_SQL = sql_text("slot_stamp_set.sql")
SLOT_HERE_SQL = sql_text("slot_here.sql")
RECORDED_SQL = sql_text("checkpoint_stamp.sql")
CHECKPOINT_SQL = sql_text("checkpoint_insert.sql")
CONFIRMED_SQL = sql_text("checkpoint_confirmed.sql")
GRANT = "GRANT EXECUTE ON FUNCTION pg_catalog.pg_stat_reset_replication_slot(text) TO postbox_owner"


class Identity(Enum):
    """How the slot now relates to the one that confirmed retention's checkpoints."""

    UNSTAMPED = "unstamped"  # no checkpoint carries a stamp yet (first run, or after a republish)
    SAME = "same"
    REPLACED = "replaced"


def judge(recorded: datetime | None, current: datetime | None) -> Identity:
    """``recorded``: the stamp retention's checkpoints carry (None: none does); ``current``: the
    slot's ``stats_reset`` now (None: never reset since it was created or its statistics were lost)."""
    if recorded is None:
        return Identity.UNSTAMPED
    return Identity.SAME if current == recorded else Identity.REPLACED


def replaced_reason(slot_name: str, recorded: datetime, current: datetime | None, flag: str = "") -> str:
    """Why nothing may go when the slot is not the one that confirmed the checkpoints, with the fix."""
    now = "none" if current is None else f"{current.isoformat()}"
    return (f"replication slot {slot_name} is not the one that confirmed retention's checkpoints (its statistics "
            f"carry the stamp {now}, the checkpoints {recorded.isoformat()}): a slot dropped and created again "
            "(a lost slot replaced, a failover, the connector re-registered) never streamed the rows written before "
            "it, so they may be the last copy of events never published; nothing was dropped. Republish them "
            f"(`postbox db republish{flag}`, docs/recovery.md), which releases the hold. A server crash, pg_upgrade "
            "or pg_stat_reset_replication_slot also clear the stamp, and need the same republish")


def stamp_refused_reason(slot_name: str) -> str:
    """Why nothing may go when retention may not stamp the slot, with the statement that fixes it."""
    return (f"retention may not stamp replication slot {slot_name} (resetting a slot's statistics is a "
            "superuser's by default), so it cannot tell that slot from a replaced one; nothing was dropped. "
            f"As a superuser, in this database: {GRANT}")


@dataclass(frozen=True)
class Check:
    """What :func:`check_slot` found: the stamp this run's checkpoint carries, or why nothing may go."""

    stamp: datetime | None
    refused: str | None = None
    hold: bool = False  # the refusal holds retention until the rows are republished


def check_slot(conn: psycopg.Connection[Any], pipeline: Pipeline, slot_name: str, *, dry_run: bool) -> Check:
    """Compare the slot's stamp with the checkpoints'; stamp it when none carries one (not in a dry run)."""
    recorded = recorded_stamp(conn, pipeline)
    current = read_stamp(conn, slot_name)
    verdict = judge(recorded, current)
    if verdict is Identity.SAME:
        return Check(current)
    if verdict is Identity.REPLACED:
        assert recorded is not None
        return Check(None, replaced_reason(slot_name, recorded, current, pipeline.flag), hold=True)
    if dry_run:
        return Check(None, f"no retention checkpoint carries the stamp of replication slot {slot_name} yet "
                           "(the first run stamps it); a dry run changes nothing, so nothing would be dropped")
    stamp = stamp_slot(conn, slot_name)
    return Check(stamp) if stamp is not None else Check(None, stamp_refused_reason(slot_name))


def read_stamp(conn: psycopg.Connection[Any], slot_name: str) -> datetime | None:
    row = conn.execute(STAMP_SQL, {"slot": slot_name}).fetchone()
    return row[0] if row else None


def recorded_stamp(conn: psycopg.Connection[Any], pipeline: Pipeline) -> datetime | None:
    row = conn.execute(pipeline.sql(RECORDED_SQL)).fetchone()
    return row[0] if row else None


def stamp_slot(conn: psycopg.Connection[Any], slot_name: str) -> datetime | None:
    """Stamp the slot and return its new stamp; None when this role may not, or when this database
    has no logical slot of that name."""
    if conn.execute(SLOT_HERE_SQL, {"slot": slot_name}).fetchone() is None:
        return None
    try:
        conn.execute(STAMP_SET_SQL, {"slot": slot_name})
    except psycopg.errors.InsufficientPrivilege:
        return None
    return read_stamp(conn, slot_name)


def record_checkpoint(conn: psycopg.Connection[Any], pipeline: Pipeline, stamp: datetime) -> str:
    """Record a checkpoint the slot with ``stamp`` must confirm; returns its LSN."""
    return str(conn.execute(pipeline.sql(CHECKPOINT_SQL), {"stamp": stamp}).fetchone()[0])  # type: ignore[index]


def confirmed_checkpoint(conn: psycopg.Connection[Any], pipeline: Pipeline, slot_name: str,
                         stamp: datetime) -> tuple[datetime, str] | None:
    """(taken_at, oldest_xid) of the newest checkpoint with ``stamp`` the slot has passed, or None."""
    row = conn.execute(pipeline.sql(CONFIRMED_SQL), {"slot": slot_name, "stamp": stamp}).fetchone()
    return (row[0], str(row[1])) if row else None


def reanchor(conn: psycopg.Connection[Any], pipeline: Pipeline, slot_name: str | None = None) -> bool:
    """Forget every checkpoint and stamp the slot afresh with one new checkpoint (for a republish).

    The old checkpoints were confirmed by a slot that may no longer stream; the new one, taken
    before the rows are re-inserted, ties later runs to the slot that publishes them, so a slot
    replaced after the republish is seen too. False when the slot cannot be stamped now (missing,
    or no privilege): the next retention run stamps it. ``slot_name``: default the pipeline's.
    """
    conn.execute(pipeline.sql("DELETE FROM {schema}.retention_checkpoints"))
    stamp = stamp_slot(conn, slot_name or pipeline.slot)
    if stamp is None:
        return False
    record_checkpoint(conn, pipeline, stamp)
    return True


__all__ = ["Check", "Identity", "check_slot", "confirmed_checkpoint", "judge", "reanchor", "record_checkpoint",
           "replaced_reason", "stamp_refused_reason"]
