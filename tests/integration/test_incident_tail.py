"""`postbox tail` agrees with an independent client (kafka-python) reading the same topic."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest
from kafka import KafkaConsumer, TopicPartition

from postbox.codec import AvroCodec, decode_record
from postbox.errors import DecodeError
from postbox.incident.records import jsonable
from postbox.outbox import Outbox
from postbox.schemas import SchemaRepository
from postbox.settings import Settings
from tests.integration.incident_support import ROOT, cli_json, insert, run_cli
from tests.support.kafka import read_until

pytestmark = pytest.mark.integration
PLACED_AT = datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=timezone.utc)


def kafka_python_read(bootstrap: str, topic: str) -> list:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=3000)
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        return list(consumer)
    finally:
        consumer.close()


def test_tail_matches_kafka_python(settings: Settings, pg_conn, unique: str, tmp_path: Path) -> None:
    agg = f"tail{unique}"
    topic = f"outbox.event.{agg}"
    shutil.copytree(ROOT / "schemas" / "order", tmp_path / agg)
    outbox = Outbox(codec=AvroCodec(SchemaRepository.load(tmp_path)))
    with outbox.transaction(pg_conn) as tx:
        for i in range(3):
            tx.emit(agg, f"o{i}", "OrderPlaced", {
                "order_id": f"o{i}", "customer_id": f"c{i % 2}", "total_cents": 100 + i, "placed_at": PLACED_AT,
                "items": [{"sku": "s", "quantity": 1, "unit_price_cents": 100 + i}]})
    json_id = insert(pg_conn, agg, "j1", "Noted", {"note": "plain JSON", "n": 7})
    pg_conn.execute("INSERT INTO postbox.outbox (id, aggregate_type, aggregate_id, event_type, payload) VALUES (%s, %s, %s, %s, %s)",
                    (str(__import__("postbox.outbox", fromlist=["uuid7"]).uuid7()), agg, "bin", "Blob", b"\x00\xff\xfe raw"))
    pg_conn.commit()
    read_until(settings.kafka_bootstrap, topic, lambda rs: len(rs) >= 5)

    tailed = cli_json("tail", topic, "--from", "beginning")
    assert tailed["complete"] and tailed["matched"] == 5
    theirs = kafka_python_read(settings.kafka_bootstrap, topic)
    assert len(theirs) == 5
    ours = {(r["partition"], r["offset"]): r for r in tailed["records"]}
    assert set(ours) == {(m.partition, m.offset) for m in theirs}
    for m in theirs:
        r = ours[(m.partition, m.offset)]
        assert r["key"] == m.key.decode() and r["timestamp_ms"] == m.timestamp
        assert [(h["key"], h["value"]) for h in r["headers"]] == [(k, v.decode() if v is not None else None) for k, v in m.headers]
        try:
            payload = jsonable(decode_record(m.value, m.headers).payload)
        except DecodeError:
            assert r["value"]["encoding"] == "bytes" and r["value"]["hex"] == m.value.hex() and r["value"]["error"]
            continue
        assert r["value"]["payload"] == payload
    encodings = sorted(r["value"]["encoding"] for r in tailed["records"])
    assert encodings == ["avro", "avro", "avro", "bytes", "json"]

    # filters: key, event type, event id, payload field; last:N; and the human output
    assert [r["key"] for r in cli_json("tail", topic, "--key", "o1")["records"]] == ["o1"]
    assert cli_json("tail", topic, "--event-type", "Noted")["records"][0]["event"]["id"] == json_id
    assert cli_json("tail", topic, "--event-id", json_id)["matched"] == 1
    assert sorted(r["key"] for r in cli_json("tail", topic, "--where", "customer_id=c0")["records"]) == ["o0", "o2"]
    assert [r["key"] for r in cli_json("tail", topic, "--where", "total_cents=101")["records"]] == ["o1"]
    assert cli_json("tail", topic, "--limit", "2")["matched"] == 2
    assert cli_json("tail", topic, "--from", "end")["matched"] == 0
    assert cli_json("tail", topic, "--from", "1h")["matched"] == 5
    followed = run_cli("tail", topic, "--follow", "--from", "beginning", "--limit", "5", "--json")
    assert followed.returncode == 0 and len([json.loads(line) for line in followed.stdout.splitlines()]) == 5
    human = run_cli("tail", topic, "--key", "bin")
    assert human.returncode == 0 and "undecodable" in human.stdout and "00fffe" in human.stdout
