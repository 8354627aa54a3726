"""One connection shared by threads or asyncio tasks: the writer never hangs and loses no event
(outbox/shared_connection.py), on the real database.

Found in review (2026-12-01): the sends that put a connection in pipeline mode (every emit under
the ``delete`` retention, ``emit_many``, ``transaction()``) failed inside psycopg when two threads
or tasks shared the connection (``AssertionError``, ``PIPELINE_SYNC``, wrong transaction nesting),
and two asyncio tasks emitting under the ``delete`` retention hung for ever. Now sends on one
connection run one after the other, and a ``transaction()`` block's connection is refused to code
outside the block with an error naming the fix.

Every wait here is bounded (thread joins, ``asyncio.wait_for``), so a hang fails the test instead of
blocking the suite. What was written is counted inside the transaction itself
(``pg_stat_xact_user_tables``: rows inserted and deleted by this transaction), which also counts
the ``delete`` retention's rows, gone from the table before the commit; every transaction here
rolls back, so nothing reaches the connector.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from postbox.errors import SharedConnectionError
from postbox.outbox import AsyncOutbox, NewEvent, Outbox, Retention

pytestmark = pytest.mark.integration

#: A hang fails the test after this long (the loads here take well under a second each).
HANG_AFTER_S = 60.0
WORKERS = 3
ROUNDS = 20

COUNT_SQL = (
    "SELECT coalesce(sum(n_tup_ins), 0)::int, coalesce(sum(n_tup_del), 0)::int "
    "FROM pg_stat_xact_user_tables WHERE schemaname = 'postbox' AND relname LIKE 'outbox%'"
)


def written(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    """Outbox rows inserted and deleted so far by ``conn``'s open transaction."""
    row = conn.execute(COUNT_SQL).fetchone()
    assert row is not None
    return row[0], row[1]


async def awritten(conn: psycopg.AsyncConnection[Any]) -> tuple[int, int]:
    cur = await conn.execute(COUNT_SQL)
    row = await cur.fetchone()
    assert row is not None
    return row[0], row[1]


def run_threads(work: Callable[[int], None]) -> list[BaseException]:
    """Run ``work(worker)`` in WORKERS threads; fail the test if any is still running after
    HANG_AFTER_S (a hang); returns what they raised."""
    errors: list[BaseException] = []

    def guarded(worker: int) -> None:
        try:
            work(worker)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(w,), daemon=True) for w in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG_AFTER_S)
    hung = [t.name for t in threads if t.is_alive()]
    assert not hung, f"threads sharing one connection hung: {hung}"
    return errors


def raised_in_another_thread(*sends: Callable[[], object]) -> list[BaseException]:
    """What each of ``sends`` raised, run one after the other in a new thread (which starts with
    an empty context: outside any transaction() block of this one); fails the test if it hangs."""
    raised: list[BaseException] = []

    def work() -> None:
        for send in sends:
            try:
                send()
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                raised.append(exc)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(HANG_AFTER_S)
    assert not thread.is_alive(), "a thread sharing the connection hung"
    return raised


def run_tasks(coro: Any) -> Any:
    async def bounded() -> Any:
        try:
            return await asyncio.wait_for(coro, HANG_AFTER_S)
        except TimeoutError:
            pytest.fail("asyncio tasks sharing one connection hung")

    return asyncio.run(bounded())


SENDS = ["emit", "emit_many"]
RETENTIONS = [Retention.DELETE, Retention.PARTITIONS]


def events(worker: int, i: int) -> list[NewEvent]:
    return [NewEvent("tshared", f"w{worker}", "Happened", {"i": i, "k": k}) for k in range(3)]


@pytest.mark.parametrize("retention", RETENTIONS, ids=lambda r: r.value)
@pytest.mark.parametrize("send", SENDS)
def test_threads_sharing_a_connection_never_hang_and_lose_no_event(
    admin_database_url: str, send: str, retention: Retention
) -> None:
    """Before: under ``delete`` AssertionError / PIPELINE_SYNC from psycopg in some threads."""
    outbox = Outbox(encoding="json", retention=retention)
    per_send = 1 if send == "emit" else 3
    with psycopg.connect(admin_database_url) as conn:

        def work(worker: int) -> None:
            for i in range(ROUNDS):
                if send == "emit":
                    outbox.emit(conn, "tshared", f"w{worker}", "Happened", {"i": i})
                else:
                    outbox.emit_many(conn, events(worker, i))

        assert run_threads(work) == []
        inserted, deleted = written(conn)
        conn.rollback()
    expected = WORKERS * ROUNDS * per_send
    assert inserted == expected
    assert deleted == (expected if retention is Retention.DELETE else 0)


@pytest.mark.parametrize("retention", RETENTIONS, ids=lambda r: r.value)
@pytest.mark.parametrize("send", SENDS)
def test_asyncio_tasks_sharing_a_connection_never_hang_and_lose_no_event(
    admin_database_url: str, send: str, retention: Retention
) -> None:
    """Before: under ``delete`` the tasks hung for ever (both ``emit`` and ``emit_many``)."""
    outbox = AsyncOutbox(encoding="json", retention=retention)
    per_send = 1 if send == "emit" else 3

    async def main() -> tuple[int, int]:
        async with await psycopg.AsyncConnection.connect(admin_database_url) as conn:

            async def work(worker: int) -> None:
                for i in range(ROUNDS):
                    if send == "emit":
                        await outbox.emit(conn, "tshared", f"w{worker}", "Happened", {"i": i})
                    else:
                        await outbox.emit_many(conn, events(worker, i))

            await asyncio.gather(*(work(w) for w in range(WORKERS)))
            counts = await awritten(conn)
            await conn.rollback()
            return counts

    inserted, deleted = run_tasks(main())
    expected = WORKERS * ROUNDS * per_send
    assert inserted == expected
    assert deleted == (expected if retention is Retention.DELETE else 0)


@pytest.mark.parametrize("retention", RETENTIONS, ids=lambda r: r.value)
def test_execute_and_emit_from_threads_and_tasks_never_hangs(admin_database_url: str, retention: Retention) -> None:
    outbox, aoutbox = Outbox(encoding="json", retention=retention), AsyncOutbox(encoding="json", retention=retention)
    with psycopg.connect(admin_database_url) as conn:

        def work(worker: int) -> None:
            for i in range(ROUNDS):
                cur, _ = outbox.execute_and_emit(conn, "SELECT %s::int", (i,), "tshared", f"w{worker}", "Happened", {"i": i})
                assert cur.fetchone() == (i,)

        assert run_threads(work) == []
        assert written(conn)[0] == WORKERS * ROUNDS
        conn.rollback()

    async def main() -> int:
        async with await psycopg.AsyncConnection.connect(admin_database_url) as conn:

            async def work(worker: int) -> None:
                for i in range(ROUNDS):
                    cur, _ = await aoutbox.execute_and_emit(conn, "SELECT %s::int", (i,), "tshared", f"w{worker}", "H", {"i": i})
                    assert await cur.fetchone() == (i,)

            await asyncio.gather(*(work(w) for w in range(WORKERS)))
            inserted = (await awritten(conn))[0]
            await conn.rollback()
            return inserted

    assert run_tasks(main()) == WORKERS * ROUNDS


def test_a_transaction_block_is_refused_to_other_threads_with_the_fix(admin_database_url: str) -> None:
    """Before: psycopg's OutOfOrderTransactionNesting after the statements ran in another thread's
    savepoint. Now the other threads' emits and blocks are refused before any SQL, and the block's
    own transaction commits exactly its own events."""
    outbox = Outbox(encoding="json")
    entered, release = threading.Event(), threading.Event()
    with psycopg.connect(admin_database_url, autocommit=True) as conn:

        def owner() -> None:
            with outbox.transaction(conn, pipeline=True) as tx:
                tx.emit("tshared", "owner", "Happened", {"n": 1})
                entered.set()
                assert release.wait(HANG_AFTER_S)
                tx.emit("tshared", "owner", "Happened", {"n": 2})
                counts.append(written(conn))
                raise psycopg.Rollback()  # keep the table clean

        def intruder(worker: int) -> None:
            assert entered.wait(HANG_AFTER_S)
            if worker == 0:
                outbox.emit(conn, "tshared", "intruder", "Happened", {"n": 0})
            elif worker == 1:
                outbox.emit_many(conn, events(worker, 0))
            else:
                with outbox.transaction(conn):
                    pass

        counts: list[tuple[int, int]] = []
        owner_thread = threading.Thread(target=owner, daemon=True)
        owner_thread.start()
        errors = run_threads(intruder)
        release.set()
        owner_thread.join(HANG_AFTER_S)
        assert not owner_thread.is_alive()
    assert len(errors) == WORKERS
    for error in errors:
        assert isinstance(error, SharedConnectionError), repr(error)
        assert "another thread or asyncio task" in str(error)
        assert "its own connection" in (error.fix or "") and "pool" in (error.fix or "")
    assert counts == [(2, 0)]


def test_an_asyncio_transaction_block_is_refused_to_other_tasks_and_open_to_its_own(admin_database_url: str) -> None:
    """Tasks created inside the block (``asyncio.gather``) emit into it, one after the other; a task
    started before the block is refused. Before: hangs or OutOfOrderTransactionNesting."""
    outbox = AsyncOutbox(encoding="json", retention=Retention.DELETE)

    async def main() -> tuple[BaseException | None, tuple[int, int]]:
        async with await psycopg.AsyncConnection.connect(admin_database_url, autocommit=True) as conn:
            entered, release = asyncio.Event(), asyncio.Event()

            async def outsider() -> BaseException | None:
                await entered.wait()
                try:
                    await outbox.emit(conn, "tshared", "outsider", "Happened", {"n": 0})
                except SharedConnectionError as exc:
                    return exc
                finally:
                    release.set()
                return None

            counts: list[tuple[int, int]] = []
            refused = asyncio.create_task(outsider())
            async with outbox.transaction(conn) as tx:
                await asyncio.gather(*(tx.emit("tshared", "inside", "Happened", {"i": i}) for i in range(10)))
                entered.set()
                await release.wait()
                counts.append(await awritten(conn))
                raise psycopg.Rollback()  # keep the table clean
            return await refused, counts[0]

    error, counts = run_tasks(main())
    assert isinstance(error, SharedConnectionError)
    assert counts == (10, 10)


def test_a_connection_is_usable_by_other_threads_after_the_block(admin_database_url: str) -> None:
    """The block gives its connection back when it ends, also when it raised."""
    outbox = Outbox(encoding="json")
    with psycopg.connect(admin_database_url) as conn:
        with pytest.raises(RuntimeError), outbox.transaction(conn):
            raise RuntimeError("the caller's error")
        conn.rollback()

        def work(worker: int) -> None:
            outbox.emit(conn, "tshared", f"after{worker}", "Happened", {"n": worker})

        assert run_threads(work) == []
        assert written(conn)[0] == WORKERS
        conn.rollback()


def test_a_nested_block_gives_the_connection_back_to_the_outer_block(admin_database_url: str) -> None:
    """A block inside a block (a savepoint) owns the connection until it ends, then the outer block
    owns it again: still refused to other threads until the outer block ends."""
    outbox = Outbox(encoding="json")

    def other_thread_emits(conn: psycopg.Connection[Any]) -> list[BaseException]:
        return raised_in_another_thread(lambda: outbox.emit(conn, "tshared", "other", "Happened", {"n": 0}))

    with psycopg.connect(admin_database_url, autocommit=True) as conn:
        with outbox.transaction(conn) as outer:
            with outbox.transaction(conn) as inner:
                inner.emit("tshared", "inner", "Happened", {"n": 1})
            outer.emit("tshared", "outer", "Happened", {"n": 2})
            refused = other_thread_emits(conn)
            assert written(conn)[0] == 2
            raise psycopg.Rollback()  # keep the table clean
        assert [type(e) for e in refused] == [SharedConnectionError]
        with conn.transaction(force_rollback=True):
            assert other_thread_emits(conn) == []


@pytest.mark.parametrize("pipeline", [True, False], ids=["pipeline", "no-pipeline"])
def test_a_blocks_handle_used_from_another_thread_sends_nothing(admin_database_url: str, pipeline: bool) -> None:
    """The handle ``transaction()`` yields, handed to a thread started in the block: its ``execute``
    is refused as its ``emit`` is, before any SQL. Before: the thread's statement ran in the block's
    transaction (and, pipelined, in a psycopg pipeline another thread was using)."""
    outbox = Outbox(encoding="json")
    with psycopg.connect(admin_database_url, autocommit=True) as conn:
        with outbox.transaction(conn, pipeline=pipeline) as tx:
            tx.execute("CREATE TEMP TABLE intrusion (n int) ON COMMIT DROP")

            refused = raised_in_another_thread(lambda: tx.execute("INSERT INTO intrusion VALUES (1)"),
                                               lambda: tx.emit("tshared", "intruder", "Happened", {"n": 0}))
            tx.execute("INSERT INTO intrusion VALUES (2)")
            rows = tx.execute("SELECT n FROM intrusion ORDER BY n").fetchall()
            assert written(conn) == (0, 0)
            raise psycopg.Rollback()  # keep the table clean
    assert rows == [(2,)]
    assert [type(e) for e in refused] == [SharedConnectionError, SharedConnectionError]
    assert "nothing was sent" in str(refused[0])


def test_an_async_blocks_handle_used_from_a_task_outside_it_sends_nothing(admin_database_url: str) -> None:
    """The async handle's ``execute``, awaited by a task started before the block: refused, before
    any SQL; tasks created in the block run their statements in it, one after the other."""
    outbox = AsyncOutbox(encoding="json")

    async def main() -> tuple[list[BaseException], list[tuple[int]]]:
        async with await psycopg.AsyncConnection.connect(admin_database_url, autocommit=True) as conn:
            handed: asyncio.Queue[Any] = asyncio.Queue()
            refused: list[BaseException] = []

            async def outsider() -> None:
                tx = await handed.get()
                try:
                    await tx.execute("INSERT INTO intrusion VALUES (1)")
                except SharedConnectionError as exc:
                    refused.append(exc)

            task = asyncio.create_task(outsider())
            async with outbox.transaction(conn) as tx:
                await tx.execute("CREATE TEMP TABLE intrusion (n int) ON COMMIT DROP")
                await handed.put(tx)
                await asyncio.wait_for(task, HANG_AFTER_S)
                await asyncio.gather(*(tx.execute("INSERT INTO intrusion VALUES (%s)", (n,)) for n in (2, 3)))
                rows = await (await tx.execute("SELECT n FROM intrusion ORDER BY n")).fetchall()
                raise psycopg.Rollback()  # keep the table clean
            return refused, rows

    refused, rows = run_tasks(main())
    assert rows == [(2,), (3,)]
    assert [type(e) for e in refused] == [SharedConnectionError]


def test_code_outside_a_block_is_refused_at_once_while_the_block_waits_on_the_database(admin_database_url: str, unique: str) -> None:
    """An async block's statement holds the connection's send lock while the database makes it wait
    (a row another transaction locked). A task outside the block emitting on that connection is
    refused at once, not after the lock: before, it waited for the lock, and had its own
    transaction held that row, the two would have waited on each other for ever, a wait no
    database can see."""
    outbox = AsyncOutbox(encoding="json")
    table = f"guard_wait_{unique}"

    async def main() -> BaseException | None:
        async with await psycopg.AsyncConnection.connect(admin_database_url, autocommit=True) as setup:
            await setup.execute(f"CREATE TABLE {table} (id int PRIMARY KEY)")
            await setup.execute(f"INSERT INTO {table} VALUES (1)")
        try:
            async with await psycopg.AsyncConnection.connect(admin_database_url, autocommit=True) as holder, \
                    await psycopg.AsyncConnection.connect(admin_database_url, autocommit=True) as conn:
                await holder.execute("BEGIN")
                await holder.execute(f"SELECT id FROM {table} WHERE id = 1 FOR UPDATE")
                waiting = asyncio.Event()

                async def outsider() -> BaseException | None:
                    await waiting.wait()
                    try:
                        await outbox.emit(conn, "tshared", "outsider", "Happened", {"n": 0})
                    except SharedConnectionError as exc:
                        return exc
                    return None

                refused = asyncio.create_task(outsider())
                async with outbox.transaction(conn, pipeline=False) as tx:
                    blocked = asyncio.create_task(tx.execute(f"SELECT id FROM {table} WHERE id = 1 FOR UPDATE"))
                    await asyncio.sleep(0.5)  # the statement is sent, and waits for the row
                    assert not blocked.done()
                    waiting.set()
                    try:  # while the row is still held; before, the outsider waited for the lock
                        outcome = await asyncio.wait_for(refused, HANG_AFTER_S / 4)
                    except TimeoutError:
                        outcome = TimeoutError("the task outside the block waited for the block's statement")
                    finally:
                        await holder.execute("ROLLBACK")  # the block's statement goes on either way
                        await asyncio.wait_for(blocked, HANG_AFTER_S / 4)
                    raise psycopg.Rollback()
                return outcome
        finally:
            async with await psycopg.AsyncConnection.connect(admin_database_url, autocommit=True) as setup:
                await setup.execute(f"DROP TABLE {table}")

    outcome = run_tasks(main())
    assert isinstance(outcome, SharedConnectionError), repr(outcome)
