"""The bad-input catalogue, producer side: rows written by hand and writer misuse.

- NULLs: the table's NOT NULL constraints refuse the row, naming the column; nothing reaches Kafka.
- An unknown aggregate type is not an error anywhere: the router sends it to
  ``outbox.event.<type>``, a topic nobody consumes, and `postbox topics` shows it (with its count).
- A payload the schema refuses, or one over the size limit, never reaches the table.
- A database error in the middle of a transaction leaves no event: the emit rolls back with it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import psycopg
import pytest

from postbox.errors import PayloadError
from postbox.outbox import NewEvent, Outbox
from postbox.outbox.rows import MAX_PAYLOAD_BYTES
from tests.support.kafka import read_until
from tests.support.outbox_rows import INSERT, insert_event

pytestmark = pytest.mark.integration


def _postbox(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from postbox.cli import main; main()", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("column", ["aggregate_type", "aggregate_id", "event_type", "payload"])
def test_hand_written_row_with_a_null_is_refused_naming_the_column(pg_conn, column):
    values = {"aggregate_type": "t", "aggregate_id": "a", "event_type": "E", "payload": b"{}"}
    values[column] = None
    with pytest.raises(psycopg.errors.NotNullViolation) as info:
        with pg_conn.transaction():
            pg_conn.execute(INSERT, (str(uuid.uuid4()), values["aggregate_type"], values["aggregate_id"], values["event_type"], values["payload"]))
    assert column in str(info.value) and "outbox" in str(info.value)


def test_hand_written_row_with_an_unknown_aggregate_type_lands_in_a_visible_unconsumed_topic(settings, pg_conn, unique):
    aggregate_type = f"nobody{unique}"
    with pg_conn.transaction():
        event_id = insert_event(pg_conn, aggregate_type, "a-1", "Whatever", b'{"x": 1}')
    topic = f"outbox.event.{aggregate_type}"
    records = read_until(settings.kafka_bootstrap, topic, lambda rs: any(r.event_id == event_id for r in rs), timeout=60)
    assert [r.event_id for r in records] == [event_id]
    listed = _postbox("topics", "--json")
    assert listed.returncode == 0, listed.stderr
    found = [t for t in json.loads(listed.stdout)["topics"] if t["topic"] == topic]
    assert found and found[0]["messages"] == 1 and found[0]["kind"] == "outbox"


def test_schema_failing_payload_never_reaches_the_table(pg_conn, admin_conn, unique):
    outbox = Outbox()
    with pytest.raises(PayloadError) as info:
        with pg_conn.transaction():
            outbox.emit(pg_conn, "order", f"o-{unique}", "OrderPlaced", {"order_id": "o", "total_cents": "lots"})
    assert info.value.event_type == "OrderPlaced" and info.value.field
    assert admin_conn.execute("SELECT count(*) FROM postbox.outbox WHERE aggregate_id = %s", (f"o-{unique}",)).fetchone()[0] == 0


def test_oversized_payload_is_refused_by_the_writer(pg_conn, admin_conn, unique):
    """Kafka refuses records over ~1 MB by default, so the connector could never deliver such an
    event: the writer refuses it before any SQL."""
    outbox = Outbox(encoding="json")
    with pytest.raises(PayloadError) as info:
        with pg_conn.transaction():
            outbox.emit(pg_conn, f"big{unique}", "a", "Big", {"blob": "x" * (MAX_PAYLOAD_BYTES + 10)})
    assert "limit" in info.value.message and info.value.fix
    assert admin_conn.execute("SELECT count(*) FROM postbox.outbox WHERE aggregate_type = %s", (f"big{unique}",)).fetchone()[0] == 0


def test_database_error_mid_transaction_leaves_no_event(settings, pg_conn, admin_conn, unique):
    outbox = Outbox(encoding="json")
    aggregate_type = f"midtx{unique}"
    with pytest.raises(psycopg.errors.DivisionByZero):
        with pg_conn.transaction():
            emitted = outbox.emit_many(pg_conn, [NewEvent(aggregate_type, "a", "E", {"n": i}) for i in range(3)])
            pg_conn.execute("SELECT 1/0")  # the application's own statement fails after the emits
    assert admin_conn.execute("SELECT count(*) FROM postbox.outbox WHERE aggregate_type = %s", (aggregate_type,)).fetchone()[0] == 0
    # A committed event after it is the only one that reaches Kafka.
    with pg_conn.transaction():
        after = outbox.emit(pg_conn, aggregate_type, "a", "E", {"n": 99})
    records = read_until(settings.kafka_bootstrap, f"outbox.event.{aggregate_type}", lambda rs: any(r.event_id == str(after.id) for r in rs), timeout=60)
    assert {r.event_id for r in records} == {str(after.id)}
    assert not {str(e.id) for e in emitted} & {r.event_id for r in records}
