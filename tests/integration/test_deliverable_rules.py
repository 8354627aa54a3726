"""#12.7: the writer's rules and the database's are the same rules (property test).

The writer (``postbox.outbox.deliverable``) and ``postbox.outbox_row_problem`` in
``src/postbox/sql/050_deliverable.sql`` must accept and refuse exactly the same rows, or one side
lets through what the other refuses. Hypothesis draws types, keys and event types around every
limit and from all of Unicode; PostgreSQL is asked for each.
"""

from __future__ import annotations

import psycopg
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from postbox.outbox.deliverable import (
    MAX_AGGREGATE_TYPE,
    MAX_EVENT_TYPE,
    MAX_KEY_BYTES,
    aggregate_type_problem,
    event_type_problem,
    key_problem,
)

pytestmark = pytest.mark.integration

LEGAL = st.sampled_from("abcXYZ019._-")
# Text PostgreSQL can store (no NUL, no lone surrogates), of any script.
ANY_CHAR = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")


def around(limit: int, alphabet: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.integers(min_value=max(0, limit - 2), max_value=limit + 2).flatmap(
        lambda n: st.text(alphabet, min_size=n, max_size=n))


TYPES = st.one_of(st.text(ANY_CHAR, max_size=20), st.text(LEGAL, min_size=1, max_size=20), around(MAX_AGGREGATE_TYPE, LEGAL))
KEYS = st.one_of(st.text(ANY_CHAR, max_size=20), around(MAX_KEY_BYTES, LEGAL), around(MAX_KEY_BYTES // 2, st.just("é")),
                 around(MAX_KEY_BYTES // 4, st.just("😀")))
EVENT_TYPES = st.one_of(st.text(ANY_CHAR, max_size=20), around(MAX_EVENT_TYPE, LEGAL))


@hsettings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(aggregate_type=TYPES, aggregate_id=KEYS, event_type=EVENT_TYPES)
def test_writer_and_database_agree_on_every_row(pg_conn: psycopg.Connection, aggregate_type: str, aggregate_id: str, event_type: str) -> None:
    python_refuses = any(p is not None for p in (
        aggregate_type_problem(aggregate_type), key_problem(aggregate_id), event_type_problem(event_type)))
    sql_problem = pg_conn.execute("SELECT postbox.outbox_row_problem(%s, %s, %s, NULL)",
                                  (aggregate_type, aggregate_id, event_type)).fetchone()[0]
    pg_conn.rollback()
    assert python_refuses == (sql_problem is not None), (aggregate_type[:40], len(aggregate_id.encode()), event_type[:40], sql_problem)


TRACEPARENTS = st.one_of(st.none(), around(512, LEGAL), st.text(ANY_CHAR, max_size=10))


@hsettings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(aggregate_type=TYPES, aggregate_id=KEYS, event_type=EVENT_TYPES, traceparent=TRACEPARENTS)
def test_the_column_types_refuse_exactly_what_the_function_names(
    pg_conn: psycopg.Connection, aggregate_type: str, aggregate_id: str, event_type: str, traceparent: str | None,
) -> None:
    """#17: the columns' domain types apply the rules (a table CHECK was rebuilt on every INSERT);
    they must refuse exactly the rows ``outbox_row_problem`` (doctor's, republish's) names."""
    sql_problem = pg_conn.execute("SELECT postbox.outbox_row_problem(%s, %s, %s, %s)",
                                  (aggregate_type, aggregate_id, event_type, traceparent)).fetchone()[0]
    pg_conn.rollback()
    try:
        pg_conn.execute("INSERT INTO postbox.outbox (id, aggregate_type, aggregate_id, event_type, payload, traceparent)"
                        " VALUES (gen_random_uuid(), %s, %s, %s, '\\x00', %s)",
                        (aggregate_type, aggregate_id, event_type, traceparent))
        refused = False
    except psycopg.errors.CheckViolation:
        refused = True
    finally:
        pg_conn.rollback()  # nothing is ever committed
    assert refused == (sql_problem is not None), (aggregate_type[:40], len(aggregate_id.encode()), event_type[:40], sql_problem)
