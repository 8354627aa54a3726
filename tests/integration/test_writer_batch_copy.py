"""A large ``emit_many`` is one binary COPY: what it keeps of the writer's promises, on real PostgreSQL.

The promises: the events commit or roll back with the caller's transaction; a bad event refuses
the whole batch before any SQL, the transaction still usable; rows land in the order given with
the ids returned; where COPY cannot serve (a pipelined connection, a client encoding other than
UTF-8 with non-ASCII text) the INSERT form writes the same rows; the delete-in-transaction
retention still leaves no row; a database without the outbox still gets the error with the fix.
"""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql
from psycopg.conninfo import make_conninfo

from postbox.codec import AvroCodec
from postbox.db import init_database
from postbox.errors import OutboxError, PayloadError
from postbox.outbox import AsyncOutbox, NewEvent, Outbox, Retention
from postbox.outbox.core import COPY_MIN_ROWS
from postbox.pipelines import Pipeline
from postbox.schemas import SchemaRepository
from postbox.settings import Settings
from postbox.stack.stack import admin_database_url

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=timezone.utc)


def placed(order_id: str) -> dict:
    return {"order_id": order_id, "customer_id": "c", "total_cents": 5, "placed_at": NOW,
            "items": [{"sku": "s", "quantity": 1, "unit_price_cents": 5}]}


@pytest.fixture
def agg(unique: str, tmp_path: Path) -> str:
    """A test-only aggregate type with the order schemas (its rows are this test's alone)."""
    name = f"c{unique}"
    shutil.copytree(ROOT / "schemas" / "order", tmp_path / name)
    return name


@pytest.fixture
def codec(agg: str, tmp_path: Path) -> AvroCodec:
    return AvroCodec(SchemaRepository.load(tmp_path))


def events(agg: str, n: int, key: str = "a") -> list[NewEvent]:
    return [NewEvent(agg, f"{key}{i % 7}", "OrderPlaced", placed(str(i))) for i in range(n)]


def stored(agg: str) -> list[tuple[object, ...]]:
    """Every column of ``agg``'s rows but the id and the time, in the order the database took them."""
    with psycopg.connect(admin_database_url()) as admin:
        return admin.execute("SELECT aggregate_type, aggregate_id, event_type, payload, traceparent FROM postbox.outbox"
                             " WHERE aggregate_type = %s ORDER BY created_at, ctid", (agg,)).fetchall()


def written(agg: str, dbname: str | None = None) -> list[tuple[str, str, bytes]]:
    """(id, aggregate_id, order_id) of ``agg``'s rows in the order the database took them."""
    url = admin_database_url() if dbname is None else make_conninfo(admin_database_url(), dbname=dbname)
    with psycopg.connect(url) as admin:
        rows = admin.execute("SELECT id::text, aggregate_id, payload FROM postbox.outbox WHERE aggregate_type = %s ORDER BY created_at, ctid",
                             (agg,)).fetchall()
    return [(i, k, bytes(p)) for i, k, p in rows]


def test_a_large_batch_is_a_copy_that_commits_and_rolls_back_with_the_transaction(
        pg_conn: psycopg.Connection, agg: str, codec: AvroCodec) -> None:
    outbox = Outbox(codec=codec)
    assert outbox.plan_many(events(agg, COPY_MIN_ROWS)).copies(pg_conn)
    assert not outbox.plan_many(events(agg, COPY_MIN_ROWS - 1)).copies(pg_conn)  # a round trip more than it saves
    with pytest.raises(RuntimeError):
        with pg_conn.transaction():
            outbox.emit_many(pg_conn, events(agg, 300, "lost"))
            raise RuntimeError("the business transaction fails")
    assert written(agg) == []
    with pg_conn.transaction():
        emitted = outbox.emit_many(pg_conn, events(agg, 300))
    rows = written(agg)
    assert [r[0] for r in rows] == [str(e.id) for e in emitted]  # the ids returned, in the order given
    assert [r[1] for r in rows] == [e.aggregate_id for e in emitted] == [f"a{i % 7}" for i in range(300)]
    assert [codec.decode(r[2]).payload["order_id"] for r in rows] == [str(i) for i in range(300)]


def test_a_bad_event_in_a_large_batch_sends_nothing_and_the_transaction_goes_on(
        pg_conn: psycopg.Connection, agg: str, codec: AvroCodec) -> None:
    outbox = Outbox(codec=codec)
    batch = events(agg, 500)
    batch[250] = NewEvent(agg, "a", "OrderPlaced", {**placed("bad"), "total_cents": "5"})
    with pg_conn.transaction():
        kept = outbox.emit(pg_conn, agg, "kept", "OrderPlaced", placed("kept"))
        with pytest.raises(PayloadError, match=r"events\[250\] \(of 500\).*total_cents") as raised:
            outbox.emit_many(pg_conn, batch)
        assert raised.value.field == "total_cents"
        assert pg_conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        assert pg_conn.execute("SELECT 41 + 1").fetchone() == (42,)
    assert [r[0] for r in written(agg)] == [str(kept.id)]


def test_a_pipelined_transaction_writes_the_same_rows_by_insert(pg_conn: psycopg.Connection, agg: str, codec: AvroCodec) -> None:
    """psycopg cannot COPY in pipeline mode (``outbox.transaction()``'s default): the INSERT form."""
    outbox = Outbox(codec=codec)
    with outbox.transaction(pg_conn) as tx:
        assert not outbox.plan_many(events(agg, 300)).copies(pg_conn)
        emitted = tx.emit_many(events(agg, 300))
    with pg_conn.transaction():
        emitted += outbox.emit_many(pg_conn, events(agg, 300))  # and the COPY after it
    rows = written(agg)
    assert [r[0] for r in rows] == [str(e.id) for e in emitted]
    assert [r[1:] for r in rows[:300]] == [r[1:] for r in rows[300:]]  # byte for byte the same rows


def test_asyncio_copies_a_large_batch(agg: str, codec: AvroCodec) -> None:
    async def run() -> list[str]:
        outbox = AsyncOutbox(codec=codec)
        async with await psycopg.AsyncConnection.connect(Settings.load().database_url) as conn:
            assert outbox.plan_many(events(agg, 300)).copies(conn)
            async with conn.transaction():
                emitted = await outbox.emit_many(conn, events(agg, 300))
        return [str(e.id) for e in emitted]

    ids = asyncio.run(run())
    assert [r[0] for r in written(agg)] == ids


def test_non_ascii_text_on_a_latin1_connection_is_inserted_as_text(agg: str, codec: AvroCodec) -> None:
    """COPY's binary text is the client encoding's bytes, which the writer makes as UTF-8; on a
    LATIN1 connection a batch with non-ASCII text takes the INSERT form (psycopg encodes it)."""
    outbox = Outbox(codec=codec)
    url = make_conninfo(Settings.load().database_url, client_encoding="LATIN1")
    with psycopg.connect(url) as conn:
        accented = [NewEvent(agg, "café", "OrderPlaced", placed(str(i))) for i in range(100)]
        assert not outbox.plan_many(accented).copies(conn) and outbox.plan_many(events(agg, 100)).copies(conn)
        with conn.transaction():
            outbox.emit_many(conn, accented)
            outbox.emit_many(conn, events(agg, 100))
    assert [r[1] for r in written(agg)] == ["café"] * 100 + [f"a{i % 7}" for i in range(100)]


@pytest.fixture
def scratch_db(unique: str) -> Iterator[str]:
    """The name of a fresh database set up for the delete-in-transaction retention; dropped after."""
    name = f"postbox_c{unique}"
    with psycopg.connect(admin_database_url(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        init_database(make_conninfo(admin_database_url(), dbname=name), app_password=None, cdc_password=None, retention="delete")
        yield name
    finally:
        with psycopg.connect(admin_database_url(), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_delete_retention_deletes_a_copied_batch_in_the_transaction(scratch_db: str, agg: str, codec: AvroCodec) -> None:
    outbox = Outbox(codec=codec, retention=Retention.DELETE)
    with psycopg.connect(make_conninfo(Settings.load().database_url, dbname=scratch_db)) as conn:
        with conn.transaction():
            emitted = outbox.emit_many(conn, events(agg, 300))
            assert len(emitted) == 300
    assert written(agg, scratch_db) == []


def test_a_copied_batch_lands_in_its_pipelines_outbox_only(unique: str, agg: str, codec: AvroCodec) -> None:
    """Two pipelines in one database: the COPY of ``Outbox(pipeline=...)`` writes that pipeline's
    table, as its INSERT does, and nothing of the other's."""
    name = f"postbox_cp{unique}"
    with psycopg.connect(admin_database_url(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    admin = make_conninfo(admin_database_url(), dbname=name)
    first, second = Pipeline.parse(None, environ={}), Pipeline(f"cp{unique}")
    try:
        for pipeline in (first, second):
            init_database(admin, app_password=None, cdc_password=None, pipeline=pipeline)
        outbox = Outbox(codec=codec, pipeline=second)
        with psycopg.connect(make_conninfo(Settings.load().database_url, dbname=name)) as conn:
            assert outbox.plan_many(events(agg, 200)).copies(conn)
            with conn.transaction():
                emitted = outbox.emit_many(conn, events(agg, 200))
        with psycopg.connect(admin) as conn:
            counts = [conn.execute(sql.SQL("SELECT count(*) FROM {}.outbox").format(sql.Identifier(p.schema))).fetchone()[0]
                      for p in (first, second)]
            ids = [i for (i,) in conn.execute(sql.SQL("SELECT id::text FROM {}.outbox ORDER BY created_at, ctid").format(
                sql.Identifier(second.schema)))]
        assert counts == [0, 200]
        assert ids == [str(e.id) for e in emitted]
    finally:
        with psycopg.connect(admin_database_url(), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_no_outbox_table_is_the_error_with_the_fix(pg_conn: psycopg.Connection, agg: str, codec: AvroCodec) -> None:
    outbox = Outbox(codec=codec, pipeline="nosuchpipeline")
    with pytest.raises(OutboxError, match="does not exist") as raised:
        with pg_conn.transaction():
            outbox.emit_many(pg_conn, events(agg, 300))
    assert "db init" in (raised.value.fix or "")


TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(batch=st.lists(st.tuples(st.text(min_size=1, max_size=8).filter(lambda s: "\x00" not in s), st.booleans(), st.integers(0, 10**9)),
                      min_size=COPY_MIN_ROWS, max_size=150))
def test_a_copied_batch_stores_what_one_emit_per_event_stores(batch: list[tuple[str, bool, int]],
                                                              tmp_path_factory: pytest.TempPathFactory) -> None:
    """Read back from the table: the rows of one emit_many (one COPY) are those of one emit per
    event, column for column, in order; only the ids and times differ."""
    tmp = tmp_path_factory.mktemp("schemas")
    token = uuid.uuid4().hex[:10]  # each example its own aggregate types (their rows are its alone)
    names = [f"p{token}{n}" for n in range(2)]
    for name in names:
        shutil.copytree(ROOT / "schemas" / "order", tmp / name)
    outbox = Outbox(codec=AvroCodec(SchemaRepository.load(tmp)))
    url = Settings.load().database_url
    with psycopg.connect(url) as conn:
        assert outbox.plan_many([NewEvent(names[0], k, "OrderPlaced", placed(str(n))) for k, _, n in batch]).copies(conn)
        with conn.transaction():
            outbox.emit_many(conn, [NewEvent(names[0], key, "OrderPlaced", placed(str(n)), traceparent=TP if traced else None)
                                    for key, traced, n in batch])
        with conn.transaction():
            for key, traced, n in batch:
                outbox.emit(conn, names[1], key, "OrderPlaced", placed(str(n)), traceparent=TP if traced else None)
    copied, one_by_one = stored(names[0]), stored(names[1])
    assert len(copied) == len(batch)
    assert [row[1:] for row in copied] == [row[1:] for row in one_by_one]


texts = st.text(max_size=12).filter(lambda s: "\x00" not in s)
longs = st.integers(-(2**63), 2**63 - 1)
moments = st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2300, 1, 1), timezones=st.just(timezone.utc))


@st.composite
def mixed_events(draw: st.DrawFn) -> tuple[str, str, dict[str, object], int | None, str | None]:
    """(key, event type, payload, version, traceparent): several kinds in one batch, the payloads'
    values across their types' ranges (text of any script, either end of a long, old and far
    timestamps, an optional field left out or null)."""
    key = draw(st.one_of(st.from_regex(r"[a-z0-9]{1,6}", fullmatch=True), texts.filter(bool)))
    trace = draw(st.sampled_from([None, TP]))
    if draw(st.booleans()):
        return key, "OrderCancelled", {"order_id": draw(texts), "reason": draw(texts), "cancelled_at": draw(moments)}, None, trace
    payload: dict[str, object] = {
        "order_id": draw(texts), "customer_id": draw(texts), "total_cents": draw(longs), "placed_at": draw(moments),
        "items": draw(st.lists(st.fixed_dictionaries({"sku": texts, "quantity": st.integers(-(2**31), 2**31 - 1),
                                                       "unit_price_cents": longs}), max_size=3))}
    version = draw(st.sampled_from([None, 1, 2]))
    if version != 1:
        payload.update(draw(st.fixed_dictionaries({}, optional={"currency": texts, "coupon": st.none() | texts})))
    return key, "OrderPlaced", payload, version, trace


@pytest.mark.parametrize("encoding", ["avro", "json"])
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(batch=st.lists(mixed_events(), min_size=COPY_MIN_ROWS, max_size=120))
def test_a_copied_batch_of_mixed_kinds_and_payloads_stores_what_one_emit_per_event_stores(
        encoding: str, batch: list[tuple[str, str, dict[str, object], int | None, str | None]],
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """As above, with several event types and versions in one batch, every payload value type and
    both encodings: the COPY stores, column for column, what one emit per event stores."""
    tmp = tmp_path_factory.mktemp("schemas")
    token = uuid.uuid4().hex[:10]
    names = [f"m{token}{n}" for n in range(2)]
    for name in names:
        shutil.copytree(ROOT / "schemas" / "order", tmp / name)
    outbox = Outbox(codec=AvroCodec(SchemaRepository.load(tmp)), encoding=encoding)
    with psycopg.connect(Settings.load().database_url) as conn:
        copied_batch = [NewEvent(names[0], k, t, p, version=v, traceparent=tp) for k, t, p, v, tp in batch]
        assert outbox.plan_many(copied_batch).copies(conn)
        with conn.transaction():
            returned = outbox.emit_many(conn, copied_batch)
        with conn.transaction():
            one_by_one = [outbox.emit(conn, names[1], k, t, p, version=v, traceparent=tp) for k, t, p, v, tp in batch]
    assert [(e.aggregate_id, e.event_type, e.schema_version, e.traceparent) for e in returned] == \
        [(e.aggregate_id, e.event_type, e.schema_version, e.traceparent) for e in one_by_one]
    copied, single = stored(names[0]), stored(names[1])
    assert len(copied) == len(batch)
    assert [row[1:] for row in copied] == [row[1:] for row in single]
