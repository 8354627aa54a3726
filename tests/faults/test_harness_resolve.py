"""The fault harness's emitter decides whether a transaction interrupted by a PostgreSQL crash
committed (tests/faults/harness.py ``Emitter._resolve``); its verdicts rest on that answer.

Found by running the fault suite (mixed scenario, seed 939800): after the immediate stop of
PostgreSQL the emitter asked ``pg_xact_status`` of its interrupted transaction and PostgreSQL
answered "transaction ID 14163 is in the future" (crash recovery had set the next xid from the WAL
it found, and none of that transaction's WAL had been flushed). The emitter thread died on the
error and the scenario failed with "emitter failed". Such a transaction cannot have committed
(COMMIT returns only after its record is flushed), so the answer is "aborted": emit it again.
Shown to fail: without the InvalidParameterValue branch the future xid raised out of _resolve.
"""

from __future__ import annotations

from types import SimpleNamespace

import psycopg
import pytest

from tests.faults.harness import Emitter

pytestmark = pytest.mark.integration


def resolve(database_url: str, xid: str) -> str:
    return Emitter._resolve(SimpleNamespace(database_url=database_url), xid)  # type: ignore[arg-type]


def test_committed_aborted_and_future_transactions(admin_database_url: str) -> None:
    with psycopg.connect(admin_database_url, autocommit=True) as conn:
        with conn.transaction():
            committed = conn.execute("SELECT pg_current_xact_id()::text").fetchone()[0]
        try:
            with conn.transaction():
                aborted = conn.execute("SELECT pg_current_xact_id()::text").fetchone()[0]
                raise RuntimeError("roll back")
        except RuntimeError:
            pass
        future = conn.execute("SELECT (pg_snapshot_xmax(pg_current_snapshot())::text::bigint + 1000000)::text").fetchone()[0]
    assert resolve(admin_database_url, committed) == "committed"
    assert resolve(admin_database_url, aborted) == "aborted"
    assert resolve(admin_database_url, future) == "aborted"  # never reached durable WAL: cannot have committed
