"""#17 what the writer sends (statements.py), without a database: batch chunks and folding."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from postbox.codec import AvroCodec
from postbox.outbox.policy import Retention
from postbox.outbox.rows import DELETE_SQL, INSERT_SQL, RowFactory
from postbox.outbox.statements import CHUNK_MAX_ROWS, DELETE_MANY_SQL, INSERT_MANY_SQL, fold_into, statements_for
from postbox.schemas import SchemaRepository

ROOT = Path(__file__).resolve().parents[2]
CODEC = AvroCodec(SchemaRepository.load(ROOT / "schemas"))
ROWS = RowFactory(CODEC)
CANCEL = {"order_id": "o", "reason": "r", "cancelled_at": datetime(2024, 1, 1, tzinfo=timezone.utc)}
#: Made once: enough rows for three chunks.
ALL_ROWS = [ROWS.prepare("order", f"o{i}", "OrderCancelled", CANCEL) for i in range(CHUNK_MAX_ROWS * 2 + 3)]


def rows(n: int) -> list:
    return ALL_ROWS[:n]


@settings(max_examples=25, deadline=None)
@given(n=st.integers(min_value=2, max_value=CHUNK_MAX_ROWS * 2 + 3), delete=st.booleans())
def test_a_batch_is_every_row_once_in_order_in_few_statements(n: int, delete: bool) -> None:
    batch = rows(n)
    plan = statements_for(batch, Retention.DELETE if delete else Retention.PARTITIONS)
    inserts = [params for query, params in plan if query == INSERT_MANY_SQL]
    assert len(inserts) == -(-n // CHUNK_MAX_ROWS)  # ceil: chunks are full but the last
    assert [i for params in inserts for i in params[0]] == [r.event.id for r in batch]
    assert all(len(set(map(len, params))) == 1 for params in inserts)  # six aligned columns
    deletes = [params[0] for query, params in plan if query == DELETE_MANY_SQL]
    assert [i for ids in deletes for i in ids] == ([r.event.id for r in batch] if delete else [])


def test_one_event_is_one_single_row_insert() -> None:
    (row,) = rows(1)
    assert statements_for([row], Retention.PARTITIONS) == [(INSERT_SQL, row.params)]
    assert statements_for([row], Retention.DELETE) == [(INSERT_SQL, row.params), (DELETE_SQL, (row.event.id,))]
    assert "COPY" not in INSERT_MANY_SQL.upper() and "unnest" in INSERT_MANY_SQL


def test_fold_puts_the_event_first_and_keeps_a_leading_with() -> None:
    (row,) = rows(1)
    [(query, params)] = fold_into("UPDATE t SET x = %s", (1,), row, Retention.PARTITIONS)
    assert query.startswith("WITH postbox_event AS (INSERT INTO postbox.outbox") and query.endswith(") UPDATE t SET x = %s")
    assert params == (*row.params, 1)
    [(query, _), delete] = fold_into("with recursive r AS (SELECT 1) SELECT * FROM r", None, row, Retention.DELETE)
    assert query.startswith("with recursive postbox_event AS (INSERT") and query.endswith("), r AS (SELECT 1) SELECT * FROM r")
    assert delete == (DELETE_SQL, (row.event.id,))
    with pytest.raises(TypeError, match="sequence"):
        fold_into("SELECT %(a)s", {"a": 1}, row, Retention.PARTITIONS)


def test_a_pipelines_writer_sends_every_statement_to_its_own_table() -> None:
    """Outbox(pipeline=...) writes its pipeline's outbox (postbox_<name>.outbox): one event, a
    batch, a folded statement and the delete-in-transaction DELETEs; the default writer sends the
    very statements it always sent (made once: psycopg finds each prepared statement by its text)."""
    from postbox.outbox import NewEvent, Outbox

    billing = Outbox(codec=CODEC, retention="delete", pipeline="billing")
    default = Outbox(codec=CODEC, retention="delete", pipeline="default")
    one = billing.plan_emit("order", "o", "OrderCancelled", CANCEL, {}).statements
    many = billing.plan_many([NewEvent("order", f"o{i}", "OrderCancelled", CANCEL) for i in range(3)]).statements
    folded = billing.plan_folded("UPDATE t SET x = %s", (1,), "order", "o", "OrderCancelled", CANCEL, {}).statements
    for query, _ in [*one, *many, *folded]:
        assert "postbox_billing.outbox " in query and "postbox.outbox" not in query, query
    assert [q.split()[0] for q, _ in one + many] == ["INSERT", "DELETE", "INSERT", "DELETE"]
    assert [q for q, _ in default.plan_emit("order", "o", "OrderCancelled", CANCEL, {}).statements] == [INSERT_SQL, DELETE_SQL]
    assert default.statements == (INSERT_SQL, DELETE_SQL, INSERT_MANY_SQL, DELETE_MANY_SQL)
    assert Outbox(codec=CODEC, pipeline="billing").statements is billing.statements  # made once per pipeline


def test_the_writer_reads_its_pipeline_from_the_environment(monkeypatch) -> None:
    from postbox.outbox import Outbox

    monkeypatch.setenv("POSTBOX_PIPELINE", "billing")
    assert Outbox(codec=CODEC).pipeline.table == "postbox_billing.outbox"
    assert Outbox(codec=CODEC, pipeline="orders").pipeline.table == "postbox_orders.outbox"
