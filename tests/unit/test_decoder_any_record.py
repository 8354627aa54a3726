"""Whatever a record holds, the decoder answers with the record's event or its failure, never an
exception, and a failure says what is wrong (its dead letter and log line carry where: the
record's origin) (review of #14.2's decoder fast paths: strict header
decoding first, the id checked by C string tests, the router's metadata read as a tuple, the
created_at fast path). Keys, values and headers as any producer can write them: bytes that are not
UTF-8, nulls, str values (kafka-python hands those through), repeated names, ids of any shape,
created_at in any form, Avro markers with garbage behind them."""

from __future__ import annotations

import json
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from postbox.codec import AvroCodec
from postbox.consumer import App
from postbox.consumer.decoding import Decoder, Routed
from postbox.consumer.dlq_record import Failure, Origin
from postbox.ids import is_event_id
from postbox.schemas.repository import SchemaRepository

GOOD_ID = st.builds(lambda: str(uuid.uuid4()))
IDS = st.one_of(GOOD_ID, st.text(max_size=40), st.just(""), GOOD_ID.map(lambda s: f'"{s}"'), GOOD_ID.map(str.upper))
CREATED = st.one_of(st.just("2024-05-06T07:08:09.123456Z"), st.text(max_size=30), st.integers(-(10**20), 10**20).map(str),
                    st.just("2024-05-06Z"), st.just("99999-01-01T00:00:00Z"))
TEXT_VALUE = st.one_of(st.text(max_size=20), IDS, CREATED)
VALUE = st.one_of(TEXT_VALUE.map(lambda s: s.encode("utf-8", "surrogatepass")), st.binary(max_size=20), st.none(), TEXT_VALUE)
NAMES = st.sampled_from(["id", "event_type", "eventType", "aggregate_type", "created_at", "traceparent", "x"])
HEADERS = st.lists(st.tuples(NAMES, VALUE), max_size=8)
PAYLOADS = st.one_of(
    st.binary(max_size=40),
    st.binary(max_size=40).map(lambda b: b"\xc3\x01" + b),  # the Avro single-object marker, then anything
    st.dictionaries(st.text(max_size=5), st.one_of(st.integers(), st.text(max_size=5), st.none()), max_size=4).map(lambda d: json.dumps(d).encode()),
    st.none(),
)


def _decoder(with_schemas: bool) -> Decoder:
    app = App("g", require_schemas=False)
    app.catch_all(lambda event, fx: None)
    return Decoder(app, AvroCodec(SchemaRepository.default()) if with_schemas else None)


DECODERS = {True: _decoder(True), False: _decoder(False)}


@settings(max_examples=400, deadline=None)
@given(key=st.one_of(st.none(), st.binary(max_size=10)), value=PAYLOADS, headers=HEADERS, with_schemas=st.booleans(),
       offset=st.integers(0, 2**40))
def test_any_record_is_its_event_or_its_failure(key, value, headers, with_schemas, offset) -> None:
    outcome = DECODERS[with_schemas](Origin("outbox.event.order", 3, offset, key, value, headers))
    assert isinstance(outcome, (Routed, Failure))
    if isinstance(outcome, Failure):
        assert outcome.kind == "permanent" and outcome.error_class and outcome.error.strip(), outcome
    else:
        event = outcome.event
        assert is_event_id(event.id)  # the dedupe key is an id, exactly as it came
        assert (event.topic, event.partition, event.offset) == ("outbox.event.order", 3, offset)
        assert event.created_at is None or event.created_at.tzinfo is not None
