"""#16.1 against the stack: a typed handler gets the same payload from an Avro record (postbox's
writer encoding) and from a stock Debezium JSON outbox record, both produced by kafka-python (a
client postbox does not use); a payload class that does not fit the schema stops ``postbox
consume`` at start-up with exit code 1, naming handler, field and schema file."""

from __future__ import annotations

import json
import shutil
import uuid
from dataclasses import dataclass
from datetime import date, datetime, timezone
from decimal import Decimal
from pathlib import Path

import pytest

from postbox.codec import AvroCodec
from postbox.consumer import App, ConsumerConfig
from postbox.effects import Effects
from postbox.events import Event
from postbox.schemas.repository import SchemaRepository
from tests.support.consumers import ThreadedRuntime, committed, create_topic, read_all, wait_for
from tests.support.independent import produce_independently

pytestmark = pytest.mark.integration

SCHEMA = {
    "type": "record", "name": "Invoiced", "namespace": "test.billing",
    "fields": [
        {"name": "invoice_id", "type": "string"},
        {"name": "issued_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "due", "type": {"type": "int", "logicalType": "date"}},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "discount", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}], "default": None},
    ],
}


@dataclass(frozen=True)
class Invoiced:
    invoice_id: str
    issued_at: datetime
    due: date
    amount: Decimal
    discount: Decimal | None


def _schemas(tmp_path: Path, aggregate: str) -> Path:
    folder = tmp_path / "schemas"
    (folder / aggregate).mkdir(parents=True)
    (folder / aggregate / "Invoiced.v1.avsc").write_text(json.dumps(SCHEMA))
    return folder


def _app(aggregate: str, folder: Path, seen: list[Event[Invoiced]]) -> App:
    app = App(schemas_dir=folder)

    @app.handler(aggregate, "Invoiced")
    def on_invoiced(event: Event[Invoiced], fx: Effects) -> None:
        seen.append(event)
        p = event.payload
        fx.hset(f"{{{aggregate}:{event.aggregate_id}}}:seen", {k: f"{type(v).__name__}:{v!r}" for k, v in vars(p).items()})

    return app


def test_avro_and_stock_json_records_reach_a_typed_handler_as_the_same_dataclass(settings, redis_client, unique, tmp_path):
    aggregate, group = f"bill{unique}", f"test-typed-{unique}"
    topic = f"outbox.event.{aggregate}"
    folder = _schemas(tmp_path, aggregate)
    create_topic(settings.kafka_bootstrap, topic, 1)
    issued = datetime(2026, 3, 4, 5, 6, 7, 891000, tzinfo=timezone.utc)
    avro = AvroCodec(SchemaRepository.load(folder)).encode(aggregate, "Invoiced", {
        "invoice_id": "i-1", "issued_at": issued, "due": date(2026, 4, 1), "amount": Decimal("12.50"), "discount": Decimal("0.50")})
    # A stock Debezium outbox: the payload column's JSON as the value, the id and type as headers.
    stock_json = json.dumps({"invoice_id": "i-1", "issued_at": "2026-03-04T07:06:07.891+02:00", "due": "2026-04-01",
                             "amount": 12.5, "discount": "0.5"}).encode()
    records = [(b"avro", avro, [("id", str(uuid.uuid4()).encode()), ("event_type", b"Invoiced")], 0),
               (b"json", stock_json, [("id", str(uuid.uuid4()).encode()), ("eventType", b"Invoiced")], 0)]
    produce_independently(settings.kafka_bootstrap, topic, records)
    seen: list[Event[Invoiced]] = []
    config = ConsumerConfig.load(group=group, topics=topic, schemas_dir=str(folder), batch_wait_ms=20)
    runtime = ThreadedRuntime(_app(aggregate, folder, seen), config).start()
    try:
        wait_for(lambda: runtime.ok() and committed(settings.kafka_bootstrap, group, topic, 1) == {0: 2}, 60, "both records committed")
    finally:
        runtime.stop()
    by_avro = redis_client.hgetall(f"{{{aggregate}:avro}}:seen")
    by_json = redis_client.hgetall(f"{{{aggregate}:json}}:seen")
    redis_client.delete(f"{{{aggregate}:avro}}:seen", f"{{{aggregate}:json}}:seen")
    assert by_avro == by_json
    assert by_avro[b"issued_at"].startswith(b"datetime:") and by_avro[b"due"] == b"date:datetime.date(2026, 4, 1)"
    assert by_avro[b"amount"] == b"Decimal:Decimal('12.50')" and by_avro[b"discount"] == b"Decimal:Decimal('0.50')"
    assert [e.payload for e in seen] == [Invoiced("i-1", issued, date(2026, 4, 1), Decimal("12.50"), Decimal("0.50"))] * 2


def test_a_payload_class_that_does_not_fit_stops_postbox_consume_at_start(settings, unique, tmp_path):
    from tests.integration.incident_support import run_cli
    from tests.support.consumers import ROOT

    aggregate = f"bill{unique}"
    folder = _schemas(tmp_path, aggregate)
    module = tmp_path / f"typed_app_{unique}.py"
    module.write_text(
        "from __future__ import annotations\n"
        "from dataclasses import dataclass\n"
        "from postbox.consumer import App\nfrom postbox.events import Event\n\n"
        "@dataclass\nclass InvoicedWrongly:\n    invoice_id: str\n    amount: float\n\n"
        f"app = App('typed-{unique}', schemas_dir={str(folder)!r})\n\n"
        f"@app.handler({aggregate!r}, 'Invoiced')\n"
        "def on_invoiced(event: Event[InvoicedWrongly], fx) -> None: ...\n"
    )
    result = run_cli("consume", f"{module.stem}:app", "--topics", f"outbox.event.{aggregate}", env={"PYTHONPATH": f"{ROOT}:{tmp_path}"})
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "handler on_invoiced" in output and "field 'amount' of InvoicedWrongly" in output
    assert "bytes (decimal) in the schema but annotated float: annotate it Decimal" in output
    assert str(folder / aggregate / "Invoiced.v1.avsc") in output
    shutil.rmtree(folder)


def test_a_payload_that_cannot_be_built_is_dead_lettered_naming_the_field_and_the_partition_moves_on(settings, redis_client, unique):
    # No schema for this event (a JSON-only app): nothing checks the payload before the typed handler.
    aggregate, group = f"nosch{unique}", f"test-typed-dlq-{unique}"
    topic = f"outbox.event.{aggregate}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    app, seen = App(require_schemas=False), []

    @app.handler(aggregate, "Paid")
    def on_paid(event: Event[Paid], fx: Effects) -> None:
        seen.append(event.payload)

    def record(payload: dict) -> tuple:
        return (b"k", json.dumps(payload).encode(), [("id", str(uuid.uuid4()).encode()), ("eventType", b"Paid")], 0)

    produce_independently(settings.kafka_bootstrap, topic, [record({"order_id": "o-1", "cents": "12"}), record({"order_id": "o-2", "cents": 5})])
    config = ConsumerConfig.load(group=group, topics=topic, batch_wait_ms=20)
    runtime = ThreadedRuntime(app, config).start()
    try:
        wait_for(lambda: runtime.ok() and committed(settings.kafka_bootstrap, group, topic, 1) == {0: 2}, 60, "both records committed")
    finally:
        runtime.stop()
    assert seen == [Paid("o-2", 5)]
    letters = read_all(settings.kafka_bootstrap, f"{topic}.dlq", expect=1)
    headers = dict(letters[0].headers())
    assert headers["postbox.error.class"] == b"PayloadTypeError"
    assert b"does not fit Paid: field 'cents' = '12': expected int, got str" in headers["postbox.error"]
    redis_client.delete(f"postbox:failures:{group}")


@dataclass(frozen=True)
class Paid:
    order_id: str
    cents: int
