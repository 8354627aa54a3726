"""End to end on the real stack: events emitted through SQLAlchemy (sync and asyncio) and Django
reach Kafka through Debezium and a consumer applies them, and the rolled-back ones never arrive.

One aggregate, one Kafka partition: each framework emits one event in a transaction that rolls
back, then one that commits, in turn. The consumer must record exactly the committed sequence
numbers, in emit order; a rolled-back event would show up between them.
"""

from __future__ import annotations

import asyncio

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from postbox.codec import EventHeaders
from postbox.consumer import App, ConsumerConfig
from postbox.effects import aggregate_keys
from postbox.outbox import AsyncOutbox, Outbox
from postbox.settings import Settings
from tests.apps.counting import record
from tests.support.consumers import ThreadedRuntime, read_all, wait_for
from tests.support.django_project import django_connections

pytestmark = pytest.mark.integration

OUTBOX = Outbox(encoding="json")
ASYNC_OUTBOX = AsyncOutbox(encoding="json")


class Rolled(Exception):
    """The business logic failing after the emit."""


def emit_with_sqlalchemy(settings: Settings, agg: str, lost: int, kept: int) -> str:
    engine = sa.create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(settings.database_url))
    try:
        with pytest.raises(Rolled), Session(engine) as session, session.begin():
            OUTBOX.emit(session, agg, "a", "Counted", {"seq": lost})
            raise Rolled()
        with Session(engine) as session, session.begin():
            return str(OUTBOX.emit(session, agg, "a", "Counted", {"seq": kept}).id)
    finally:
        engine.dispose()


def emit_with_async_sqlalchemy(settings: Settings, agg: str, lost: int, kept: int) -> str:
    async def connect() -> psycopg.AsyncConnection:
        return await psycopg.AsyncConnection.connect(settings.database_url)

    async def scenario() -> str:
        engine = create_async_engine("postgresql+psycopg://", async_creator=connect)
        try:
            async with AsyncSession(engine) as session:
                await ASYNC_OUTBOX.emit(session, agg, "a", "Counted", {"seq": lost})
                await session.rollback()
                async with session.begin():
                    return str((await ASYNC_OUTBOX.emit(session, agg, "a", "Counted", {"seq": kept})).id)
        finally:
            await engine.dispose()

    return asyncio.run(scenario())


def emit_with_django(agg: str, lost: int, kept: int) -> str:
    django_connections()
    from django.db import connection, transaction

    try:
        with pytest.raises(Rolled), transaction.atomic():
            OUTBOX.emit(connection, agg, "a", "Counted", {"seq": lost})
            raise Rolled()
        with transaction.atomic():
            return str(OUTBOX.emit(connection, agg, "a", "Counted", {"seq": kept}).id)
    finally:
        connection.close()


def test_events_emitted_through_sqlalchemy_and_django_reach_kafka_and_a_consumer(settings: Settings, redis_client, unique: str) -> None:
    agg = f"frameworks{unique}"
    topic = f"outbox.event.{agg}"
    committed_ids = [
        emit_with_sqlalchemy(settings, agg, lost=100, kept=1),
        emit_with_async_sqlalchemy(settings, agg, lost=200, kept=2),
        emit_with_django(agg, lost=300, kept=3),
    ]

    records = read_all(settings.kafka_bootstrap, topic, expect=3, timeout=90, linger=2)
    assert [EventHeaders.parse(r.headers()).event_id for r in records] == committed_ids

    app = App(require_schemas=False)
    app.catch_all(record)
    runtime = ThreadedRuntime(app, ConsumerConfig.load(group=f"test-frameworks-{unique}", topics=topic)).start()
    seq = aggregate_keys(agg, "a")("seq")
    try:
        wait_for(lambda: runtime.ok() and redis_client.llen(seq) >= 3, 90, "the consumer applying the three events")
    finally:
        runtime.stop()
    assert redis_client.lrange(seq, 0, -1) == [b"1", b"2", b"3"]
    redis_client.delete(seq, aggregate_keys(agg, "a")("count"))
