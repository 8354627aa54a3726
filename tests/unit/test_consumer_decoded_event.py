"""The decoder builds each record's Event without Event's generated __init__ (postbox.frozen):
the result must be the same Event a handler would get from the constructor — every field set,
equal, frozen — so a field added to Event cannot silently go missing from decoded events."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timezone

import pytest

from postbox.consumer import App
from postbox.consumer.decoding import Decoder, Routed
from postbox.consumer.dlq_record import Origin
from postbox.events import Event

EVENT_ID = "4bf92f35-77b3-4da6-a3ce-929d0e0e4736"


def _decoded() -> Event:
    app = App("g", require_schemas=False)
    app.handler("order", "OrderPaid")(lambda event, fx: None)
    headers = [("id", EVENT_ID.encode()), ("event_type", b"OrderPaid"), ("aggregate_type", b"order"),
               ("created_at", b"2026-12-01T01:40:00.5Z"), ("x-extra", None)]
    outcome = Decoder(app, None)(Origin("outbox.event.order", 2, 41, b"o-7", json.dumps({"cents": 5}).encode(), headers))
    assert isinstance(outcome, Routed), outcome
    return outcome.event


def test_a_decoded_event_equals_the_constructed_one_field_for_field() -> None:
    event = _decoded()
    assert set(vars(event)) == {f.name for f in dataclasses.fields(Event)}
    assert event == Event(
        id=EVENT_ID, aggregate_type="order", aggregate_id="o-7", event_type="OrderPaid", payload={"cents": 5},
        headers={"id": EVENT_ID, "event_type": "OrderPaid", "aggregate_type": "order",
                 "created_at": "2026-12-01T01:40:00.5Z", "x-extra": ""},
        topic="outbox.event.order", partition=2, offset=41,
        created_at=datetime(2026, 12, 1, 1, 40, 0, 500000, tzinfo=timezone.utc),
    )  # fmt: skip


def test_a_decoded_event_is_frozen() -> None:
    event = _decoded()
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.id = "other"  # type: ignore[misc]  # the point: refused at run time


def _avro_failure(event_type: str):
    """The decoder's verdict on an Avro record with a fingerprint nobody here knows, labelled ``event_type``."""
    from postbox.codec import AvroCodec
    from postbox.consumer.dlq_record import Failure
    from postbox.schemas import SchemaRepository

    app = App("g", require_schemas=False)
    app.handler("*", "*")(lambda event, fx: None)
    value = b"\xc3\x01" + bytes.fromhex("0badc0ffee0ddf00") + b"\x02"
    headers = [("id", EVENT_ID.encode()), ("event_type", event_type.encode()), ("aggregate_type", b"order")]
    outcome = Decoder(app, AvroCodec(SchemaRepository.default()))(Origin("outbox.event.order", 0, 7, b"o-7", value, headers))
    assert isinstance(outcome, Failure), outcome
    return outcome


def test_an_avro_event_whose_type_has_no_local_schema_is_an_unknown_event_type() -> None:
    # DESIGN's error classes: an event type this consumer has no schema for is UnknownEventType
    # (not DecodeError: its bytes may be fine, this deployment lacks the type).
    failure = _avro_failure("Mystery")
    assert failure.error_class == "UnknownEventType"
    assert "Mystery" in failure.error and "outbox.event.order[0]@7" in failure.error


def test_an_unknown_fingerprint_of_a_known_event_type_stays_a_decode_error() -> None:
    # OrderPlaced has schemas here: a fingerprint none of them has is a writer version not
    # deployed here (or corrupt bytes), which is DecodeError.
    failure = _avro_failure("OrderPlaced")
    assert failure.error_class == "DecodeError"
    assert "fingerprint 0badc0ffee0ddf00" in failure.error


def test_the_codecs_decoded_value_equals_the_constructed_one_field_for_field() -> None:
    # AvroCodec.decode builds its DecodedEvent in one step too (postbox.frozen.assemble)
    from postbox.codec import AvroCodec, DecodedEvent
    from postbox.schemas import SchemaRepository

    codec = AvroCodec(SchemaRepository.default())
    schema = codec.schema_for("order", "OrderCancelled")
    payload = {"order_id": "o-1", "reason": "changed my mind", "cancelled_at": datetime(2026, 12, 1, 3, 0, tzinfo=timezone.utc)}
    decoded = codec.decode(codec.encode_with(schema, payload))
    assert set(vars(decoded)) == {f.name for f in dataclasses.fields(DecodedEvent)}
    assert decoded == DecodedEvent(payload, "OrderCancelled", "order", "avro", schema.version, schema.version, schema.fingerprint.hex())
    with pytest.raises(dataclasses.FrozenInstanceError):
        decoded.encoding = "json"  # type: ignore[misc]  # the point: refused at run time
