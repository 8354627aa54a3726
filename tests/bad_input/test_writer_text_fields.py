"""NUL characters and lone surrogates in ``aggregate_type``, ``aggregate_id`` and ``event_type``:
the writer's ``PayloadError`` naming the field, before any SQL, and the caller's transaction goes on.

Before: a NUL in the key or the event type raised psycopg's ``DataError`` ("PostgreSQL text fields
cannot contain NUL (0x00) bytes") and a lone surrogate a ``UnicodeEncodeError`` from deep inside
the parameter dumping, neither naming the field; a bad ``aggregate_type`` was refused, but its
message held the raw character, so printing or logging the error raised ``UnicodeEncodeError``.

Hypothesis draws the bad text (legal characters around one NUL or one lone surrogate) for each
field and each way to emit (``emit``, ``emit_many``, ``execute_and_emit``, sync and async). Every
example runs in one REPEATABLE READ transaction on the real database (so other sessions' commits
stay out of its counts): the bad emit is refused, then a good emit in the same transaction is
written, and the outbox's row count went up by exactly one. Every transaction rolls back.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from postbox.errors import PayloadError
from postbox.outbox import AsyncOutbox, NewEvent, Outbox
from postbox.outbox.deliverable import aggregate_type_problem, event_type_problem, key_problem

pytestmark = pytest.mark.integration

GOOD = {"aggregate_type": "ttext", "aggregate_id": "a-1", "event_type": "Happened"}
FIELDS = list(GOOD)
WAYS = ["emit", "emit_many", "execute_and_emit"]

NUL_OR_SURROGATE = st.one_of(st.just("\x00"), st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, categories=["Cs"]))
LEGAL = st.text(st.sampled_from("abcXYZ019._-"), max_size=8)
BAD_TEXT = st.builds(lambda before, bad, after: before + bad + after, LEGAL, NUL_OR_SURROGATE, LEGAL)

COUNT_SQL = "SELECT count(id) FROM postbox.outbox"  # the app role may read the id column only


def fields_with(field: str, bad: str) -> dict[str, str]:
    return {**GOOD, field: bad}


def assert_names_the_field(error: PayloadError, field: str) -> None:
    assert error.field == field
    message = str(error)
    message.encode("utf-8")  # printable: raised UnicodeEncodeError before, for a surrogate
    assert "\x00" not in message
    assert field in message


def emit_sync(outbox: Outbox, conn: psycopg.Connection[Any], way: str, f: dict[str, str]) -> None:
    if way == "emit":
        outbox.emit(conn, f["aggregate_type"], f["aggregate_id"], f["event_type"], {"n": 1})
    elif way == "emit_many":
        outbox.emit_many(conn, [NewEvent(GOOD["aggregate_type"], "first", "Happened", {"n": 0}),
                                NewEvent(f["aggregate_type"], f["aggregate_id"], f["event_type"], {"n": 1})])
    else:
        outbox.execute_and_emit(conn, "SELECT 1", None, f["aggregate_type"], f["aggregate_id"], f["event_type"], {"n": 1})


async def emit_async(outbox: AsyncOutbox, conn: psycopg.AsyncConnection[Any], way: str, f: dict[str, str]) -> None:
    if way == "emit":
        await outbox.emit(conn, f["aggregate_type"], f["aggregate_id"], f["event_type"], {"n": 1})
    elif way == "emit_many":
        await outbox.emit_many(conn, [NewEvent(GOOD["aggregate_type"], "first", "Happened", {"n": 0}),
                                      NewEvent(f["aggregate_type"], f["aggregate_id"], f["event_type"], {"n": 1})])
    else:
        await outbox.execute_and_emit(conn, "SELECT 1", None, f["aggregate_type"], f["aggregate_id"], f["event_type"], {"n": 1})


@pytest.fixture(scope="module")
def conn(settings: Any) -> Any:
    with psycopg.connect(settings.database_url) as connection:
        connection.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        yield connection


@pytest.mark.parametrize("pipelined", [False, True], ids=["plain", "pipeline"])
@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("field", FIELDS)
@hsettings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bad=BAD_TEXT)
def test_sync_writer_names_the_field_and_the_transaction_goes_on(
    conn: psycopg.Connection[Any], field: str, way: str, pipelined: bool, bad: str
) -> None:
    outbox = Outbox(encoding="json")
    try:
        with conn.pipeline() if pipelined else conn.transaction(force_rollback=True):
            before = conn.execute(COUNT_SQL).fetchone()[0]  # the caller's own statement before the emit
            with pytest.raises(PayloadError) as info:
                emit_sync(outbox, conn, way, fields_with(field, bad))
            assert_names_the_field(info.value, field)
            outbox.emit(conn, GOOD["aggregate_type"], GOOD["aggregate_id"], GOOD["event_type"], {"n": 2})
            assert conn.execute(COUNT_SQL).fetchone() == (before + 1,)
    finally:
        conn.rollback()


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("field", FIELDS)
@hsettings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bad=BAD_TEXT)
def test_async_writer_names_the_field_and_the_transaction_goes_on(settings: Any, field: str, way: str, bad: str) -> None:
    outbox = AsyncOutbox(encoding="json")

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(settings.database_url) as aconn:
            await aconn.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
            async with aconn.pipeline():
                before = (await (await aconn.execute(COUNT_SQL)).fetchone())[0]
                with pytest.raises(PayloadError) as info:
                    await emit_async(outbox, aconn, way, fields_with(field, bad))
                assert_names_the_field(info.value, field)
                await outbox.emit(aconn, GOOD["aggregate_type"], GOOD["aggregate_id"], GOOD["event_type"], {"n": 2})
                cur = await aconn.execute(COUNT_SQL)
                assert await cur.fetchone() == (before + 1,)
            await aconn.rollback()

    asyncio.run(main())


@given(bad=BAD_TEXT)
def test_every_rule_refuses_nul_and_lone_surrogates_with_a_printable_reason(bad: str) -> None:
    """The rules themselves (no database): each field's problem names it and prints."""
    for field, problem in (("aggregate_type", aggregate_type_problem(bad)), ("aggregate_id", key_problem(bad)),
                           ("event_type", event_type_problem(bad))):
        assert problem is not None and problem.startswith(field), (field, bad)
        problem.encode("utf-8")
        assert "\x00" not in problem
