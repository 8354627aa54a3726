"""The benchmark's polling publisher (bench/polling_publisher.py) is a fair baseline only if it relays
every outbox row exactly once and its records look like the Outbox Event Router's: same topic, key,
value and header names in the same order, so the same consumer reads both."""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from postbox.consumer.runtime import parse_created_at
from postbox.outbox import NewEvent, Outbox
from tests.support.consumers import read_all

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from polling_publisher import PollingPublisher, setup_database  # noqa: E402


def _payload(i: int) -> dict:
    return {"order_id": f"o{i}", "customer_id": "c", "total_cents": i, "placed_at": datetime(2024, 1, 1, tzinfo=timezone.utc),
            "items": [{"sku": "s", "quantity": 1, "unit_price_cents": i}], "currency": "EUR", "coupon": None}


def test_relays_every_row_once_with_the_routers_record_shape(settings, admin_database_url, pg_conn, unique, tmp_path):
    import shutil

    from postbox.codec import AvroCodec
    from postbox.schemas import SchemaRepository

    agg = f"poll{unique}"
    schemas = tmp_path / "schemas"
    shutil.copytree(ROOT / "schemas" / "order", schemas / agg)
    outbox = Outbox(codec=AvroCodec(SchemaRepository.load(schemas)))
    dbname = f"postbox_test_polling_{unique}"
    setup_database(admin_database_url, dbname, app_role=conninfo_to_dict(settings.database_url).get("user"))
    dsn = make_conninfo(settings.database_url, dbname=dbname)
    relay = PollingPublisher(dsn, settings.kafka_bootstrap, poll_interval_ms=10, batch_size=7)
    try:
        n = 25
        with psycopg.connect(dsn) as conn, conn.transaction():
            emitted = outbox.emit_many(conn, [NewEvent(agg, f"o{i % 4}", "OrderPlaced", _payload(i)) for i in range(n)])
        published = 0
        for _ in range(20):  # batches of 7: four cycles publish everything, the fifth finds nothing
            published += relay.run_once()
        assert published == n
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT count(*) FROM postbox.outbox WHERE published_at IS NULL").fetchone()[0] == 0

        records = read_all(settings.kafka_bootstrap, f"outbox.event.{agg}", expect=n)
        ids = [dict(m.headers())["id"].decode() for m in records]
        assert sorted(ids) == sorted(str(e.id) for e in emitted)  # every row, none twice
        by_id = {str(e.id): e for e in emitted}
        for m in records:
            headers = m.headers()
            assert [k for k, _ in headers] == ["id", "event_type", "aggregate_type", "created_at", "traceparent"]
            h = dict(headers)
            event = by_id[h["id"].decode()]
            assert m.key() == event.aggregate_id.encode()
            assert h["event_type"] == b"OrderPlaced" and h["aggregate_type"] == agg.encode()
            assert h["traceparent"] is None
            assert parse_created_at(h["created_at"].decode()) is not None
            assert h["created_at"].endswith(b"Z")
        # Per aggregate, records stay in emit order within one partition (the key decides it).
        for aggregate_id in {e.aggregate_id for e in emitted}:
            mine = [m for m in records if m.key() == aggregate_id.encode()]
            assert len({m.partition() for m in mine}) == 1
            order = [str(e.id) for e in emitted if e.aggregate_id == aggregate_id]
            assert [dict(m.headers())["id"].decode() for m in sorted(mine, key=lambda m: m.offset())] == order

        # The CDC path's record of an identical event, for the shape: same header names and order,
        # value bytes passed through unchanged.
        cdc_agg = f"cdc{unique}"
        shutil.copytree(ROOT / "schemas" / "order", schemas / cdc_agg)
        outbox = Outbox(codec=AvroCodec(SchemaRepository.load(schemas)))
        with pg_conn.transaction():
            cdc_event = outbox.emit(pg_conn, cdc_agg, "o1", "OrderPlaced", _payload(1))
        cdc = read_all(settings.kafka_bootstrap, f"outbox.event.{cdc_agg}", expect=1, timeout=60)
        assert len(cdc) == 1
        assert [k for k, _ in cdc[0].headers()] == [k for k, _ in records[0].headers()]
        assert dict(cdc[0].headers())["id"].decode() == str(cdc_event.id)
        poll_o1 = next(m for m in records if dict(m.headers())["id"].decode() == str(emitted[1].id))
        assert cdc[0].value() == poll_o1.value()  # same payload, same bytes on both paths
    finally:
        relay.close()
        with psycopg.connect(admin_database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname)))
        from confluent_kafka.admin import AdminClient

        AdminClient({"bootstrap.servers": settings.kafka_bootstrap}).delete_topics(
            [f"outbox.event.{agg}", f"outbox.event.cdc{unique}"])
