"""The Debezium replication slot, as the pipeline sees it: active, lag, and how close it is to loss.

Why its own module: `postbox status` (the local stack), `postbox lag` and `postbox doctor` (any
database) and outbox retention all read the same few columns of ``pg_replication_slots``; the
library must not import the local stack to get them.

``wal_status`` (PostgreSQL 13+): ``reserved`` / ``extended`` the slot's WAL is kept; ``unreserved``
it is past ``max_slot_wal_keep_size`` and will be lost at the next checkpoint; ``lost`` the WAL is
gone and the slot can never stream again (docs/recovery.md). ``safe_wal_size``: bytes of WAL that
can still be written before the slot is in danger (NULL when ``max_slot_wal_keep_size = -1``).
``max_slot_wal_keep_size`` counts all WAL of the cluster, not only the outbox's.
"""

from __future__ import annotations

from typing import Any

from postbox.pipelines import DEFAULT

#: The default pipeline's slot (each pipeline's: :attr:`postbox.pipelines.Pipeline.slot`).
SLOT_NAME = DEFAULT.slot
#: wal_status values that mean events written now may never be published.
LOSS_STATES = ("lost", "unreserved")

SLOT_SQL = """
SELECT active,
       pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint AS lag_bytes,
       pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint AS retained_bytes,
       wal_status,
       safe_wal_size,
       confirmed_flush_lsn::text,
       database
  FROM pg_replication_slots
 WHERE slot_name = %s
"""


def read_slot(conn: Any, slot_name: str = SLOT_NAME) -> dict[str, Any]:
    """The slot's state on an open psycopg connection (``state`` missing when there is none)."""
    row = conn.execute(SLOT_SQL, (slot_name,)).fetchone()
    if row is None:
        return {"name": slot_name, "state": "missing", "lag_bytes": None, "wal_status": None, "safe_wal_size": None}
    active, lag, retained, wal_status, safe, confirmed, database = row
    return {
        "name": slot_name,
        "state": "active" if active else "inactive",
        "lag_bytes": lag,
        "retained_bytes": retained,
        "wal_status": wal_status,
        "safe_wal_size": safe,
        "confirmed_flush_lsn": confirmed,
        "database": database,
    }


def slot_status(database_url: str, slot_name: str = SLOT_NAME) -> dict[str, Any]:
    """The slot's state, or ``state: unreachable`` with the error; never raises."""
    import psycopg

    try:
        with psycopg.connect(database_url, connect_timeout=3, autocommit=True) as conn:
            return read_slot(conn, slot_name)
    except psycopg.Error as exc:
        text = str(exc).strip()
        return {"name": slot_name, "state": "unreachable", "error": text.splitlines()[0] if text else type(exc).__name__}


def describe(slot: dict[str, Any]) -> str:
    """One line for people: ``active, wal_status reserved, 4.0 GB of WAL left before loss, lag 1.2 MB``."""
    state = slot.get("state")
    if state in ("missing", "unreachable", "unknown", None):
        return f"{state}" + (f": {slot['error']}" if slot.get("error") else "")
    parts = [state, f"wal_status {slot.get('wal_status')}"]
    safe = slot.get("safe_wal_size")
    if slot.get("wal_status") == "lost":
        parts.append("WAL needed by the slot is gone")
    elif safe is not None:
        parts.append(f"{human_bytes(safe)} of WAL left before loss")
    else:
        parts.append("no WAL limit (max_slot_wal_keep_size = -1)")
    if slot.get("lag_bytes") is not None:
        parts.append(f"lag {human_bytes(slot['lag_bytes'])}")
    return ", ".join(parts)


def human_bytes(n: int | None) -> str:
    if n is None:
        return "?"
    value = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value):,} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} bytes"


__all__ = ["LOSS_STATES", "SLOT_NAME", "describe", "human_bytes", "read_slot", "slot_status"]
