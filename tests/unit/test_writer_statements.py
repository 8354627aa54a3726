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
ROWS = RowFactory(AvroCodec(SchemaRepository.load(ROOT / "schemas")))
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
