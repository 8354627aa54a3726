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
rows are republished. A failover and ``pg_upgrade`` need a new slot anyway, and a manual reset
changes the stamp: each reads as a replaced slot, the safe side (docs/recovery.md).

Crash recovery discards every statistic, the stamp with it, and sets the cluster-wide reset time
(``pg_stat_archiver.stats_reset``). A slot without a stamp after such a discard may well be the
same slot, but nothing in PostgreSQL proves it: retention holds as for a replaced slot, says so,
and lets the operator who knows the slot survived vouch for it (:func:`trust_slot`) instead of
republishing every retained row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any

import psycopg

from postbox.errors import RetentionError
from postbox.outbox.sql_text import sql_text
from postbox.pipelines import Pipeline

STAMP_SQL = sql_text("slot_stamp.sql")
STAMP_SET_SQL = sql_text("slot_stamp_set.sql")
SLOT_HERE_SQL = sql_text("slot_here.sql")
RECORDED_SQL = sql_text("checkpoint_stamp.sql")
CHECKPOINT_SQL = sql_text("checkpoint_insert.sql")
CONFIRMED_SQL = sql_text("checkpoint_confirmed.sql")
DISCARDED_SQL = sql_text("statistics_discarded.sql")
RESTAMP_SQL = sql_text("checkpoint_restamp.sql")
HOLDS_NEEDING_REPUBLISH_SQL = sql_text("holds_needing_republish.sql")
RELEASE_TRUST_SQL = sql_text("holds_release_trust.sql")
HOLD_SQL = sql_text("hold_insert.sql")
GRANT = "GRANT EXECUTE ON FUNCTION pg_catalog.pg_stat_reset_replication_slot(text) TO postbox_owner"


class Identity(Enum):
    """How the slot now relates to the one that confirmed retention's checkpoints."""

    UNSTAMPED = "unstamped"  # no checkpoint carries a stamp yet (first run, or after a republish)
    SAME = "same"
    REPLACED = "replaced"
    STATS_LOST = "statistics lost"  # no stamp, and the server discarded every statistic since


#: The kinds of retention hold (``retention_holds.kind``): only a republish releases the first;
#: an operator's ``--trust-slot`` may release the second.
HOLD_REPUBLISH = "republish"
HOLD_TRUST = "trust"


def judge(recorded: datetime | None, current: datetime | None, discarded_at: datetime | None = None) -> Identity:
    """``recorded``: the stamp retention's checkpoints carry (None: none does); ``current``: the
    slot's ``stats_reset`` now (None: never reset since it was created or its statistics were lost);
    ``discarded_at``: when the server last reset its cluster-wide statistics (crash recovery does)."""
    if recorded is None:
        return Identity.UNSTAMPED
    if current == recorded:
        return Identity.SAME
    if current is None and discarded_at is not None and discarded_at > recorded:
        return Identity.STATS_LOST
    return Identity.REPLACED


def replaced_reason(slot_name: str, recorded: datetime, current: datetime | None, flag: str = "") -> str:
    """Why nothing may go when the slot is not the one that confirmed the checkpoints, with the fix."""
    now = "none" if current is None else f"{current.isoformat()}"
    return (f"replication slot {slot_name} is not the one that confirmed retention's checkpoints (its statistics "
            f"carry the stamp {now}, the checkpoints {recorded.isoformat()}): a slot dropped and created again "
            "(a lost slot replaced, a failover, the connector re-registered) never streamed the rows written before "
            "it, so they may be the last copy of events never published; nothing was dropped. Republish them "
            f"(`postbox db republish{flag}`, docs/recovery.md), which releases the hold. A server crash, pg_upgrade "
            "or pg_stat_reset_replication_slot also clear the stamp, and need the same republish")


def stats_lost_reason(slot_name: str, recorded: datetime, discarded_at: datetime, flag: str = "") -> str:
    """Why nothing may go when the server discarded the slot's stamp with every statistic, with both fixes."""
    return (f"PostgreSQL discarded its statistics at {discarded_at.isoformat()} (crash recovery, an immediate "
            f"shutdown), and with them the stamp of replication slot {slot_name} that retention's checkpoints carry "
            f"({recorded.isoformat()}): retention cannot tell that slot from a replaced one; nothing was dropped. If the "
            f"slot was not dropped and created again since (the connector's log shows it resumed the existing slot), "
            f"vouch for it: `postbox db retention --trust-slot{flag}`. Otherwise republish the retained rows "
            f"(`postbox db republish{flag}`, docs/recovery.md)")


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
    hold: str | None = None  # the kind of hold the refusal puts on retention (HOLD_REPUBLISH, HOLD_TRUST)


def check_slot(conn: psycopg.Connection[Any], pipeline: Pipeline, slot_name: str, *, dry_run: bool) -> Check:
    """Compare the slot's stamp with the checkpoints'; stamp it when none carries one (not in a dry run)."""
    recorded = recorded_stamp(conn, pipeline)
    current = read_stamp(conn, slot_name)
    discarded_at = statistics_discarded_at(conn)
    verdict = judge(recorded, current, discarded_at)
    if verdict is Identity.SAME:
        return Check(current)
    if verdict is Identity.STATS_LOST:
        assert recorded is not None and discarded_at is not None
        return Check(None, stats_lost_reason(slot_name, recorded, discarded_at, pipeline.flag), hold=HOLD_TRUST)
    if verdict is Identity.REPLACED:
        assert recorded is not None
        return Check(None, replaced_reason(slot_name, recorded, current, pipeline.flag), hold=HOLD_REPUBLISH)
    if dry_run:
        return Check(None, f"no retention checkpoint carries the stamp of replication slot {slot_name} yet "
                           "(the first run stamps it); a dry run changes nothing, so nothing would be dropped")
    stamp = stamp_slot(conn, slot_name)
    return Check(stamp) if stamp is not None else Check(None, stamp_refused_reason(slot_name))


def read_stamp(conn: psycopg.Connection[Any], slot_name: str) -> datetime | None:
    row = conn.execute(STAMP_SQL, {"slot": slot_name}).fetchone()
    return row[0] if row else None


def statistics_discarded_at(conn: psycopg.Connection[Any]) -> datetime | None:
    row = conn.execute(DISCARDED_SQL).fetchone()
    return row[0] if row else None


def recorded_stamp(conn: psycopg.Connection[Any], pipeline: Pipeline) -> datetime | None:
    row = conn.execute(pipeline.sql(RECORDED_SQL)).fetchone()
    return row[0] if row else None


def hold(conn: psycopg.Connection[Any], pipeline: Pipeline, reason: str, kind: str = HOLD_REPUBLISH) -> None:
    """Hold retention (nothing dropped) until a republish, or for :data:`HOLD_TRUST` an operator's
    ``--trust-slot``, releases it. A hold that needs a republish is added beside one that does not."""
    conn.execute(pipeline.sql(HOLD_SQL), {"reason": reason, "kind": kind})


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


def trust_slot(conn: psycopg.Connection[Any], pipeline: Pipeline, slot_name: str) -> datetime:
    """The operator vouches that the slot is the one that confirmed the checkpoints (its stamp went
    with the server's statistics): stamp it afresh, carry the checkpoints over to the new stamp and
    release the holds that only asked for this. Refused while a hold needs a republish (a missing,
    lost or replaced slot), or when the slot cannot be stamped."""
    held = conn.execute(pipeline.sql(HOLDS_NEEDING_REPUBLISH_SQL), {"kind": HOLD_TRUST}).fetchone()
    if held is not None:
        raise RetentionError(f"--trust-slot cannot release this hold: {held[0]}",
                             fix=f"republish the retained rows: postbox db republish{pipeline.flag} (docs/recovery.md)")
    stamp = stamp_slot(conn, slot_name)
    if stamp is None:
        raise RetentionError(f"--trust-slot: replication slot {slot_name} cannot be stamped (missing from this "
                             "database, or this role may not reset its statistics)", fix=GRANT)
    conn.execute(pipeline.sql(RESTAMP_SQL), {"stamp": stamp})
    conn.execute(pipeline.sql(RELEASE_TRUST_SQL), {"kind": HOLD_TRUST})
    return stamp


__all__ = ["Check", "HOLD_REPUBLISH", "HOLD_TRUST", "Identity", "check_slot", "confirmed_checkpoint", "hold", "judge",
           "reanchor", "record_checkpoint", "replaced_reason", "stamp_refused_reason", "stats_lost_reason", "trust_slot"]
