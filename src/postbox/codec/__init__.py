"""Payload codecs: Avro single-object encoding (postbox's own) and JSON (stock Debezium outboxes).

Consumers decode a Kafka record with :func:`decode_record`, which picks the codec from the bytes
(Avro values start with the single-object marker ``C3 01``; JSON never does) and checks the
``event_type`` header against the writer schema.
"""

from __future__ import annotations

from postbox.codec.avro import MARKER, AvroCodec, DecodedEvent, is_single_object, split_single_object
from postbox.codec.headers import EventHeaders, HeaderInput
from postbox.codec.json_codec import JsonCodec
from postbox.schemas.repository import SchemaRepository

__all__ = [
    "MARKER",
    "AvroCodec",
    "DecodedEvent",
    "EventHeaders",
    "JsonCodec",
    "decode_record",
    "is_single_object",
    "split_single_object",
]


def decode_record(
    value: bytes | None,
    headers: HeaderInput = None,
    *,
    repository: SchemaRepository | None = None,
    reader_version: int | None = None,
    codec: AvroCodec | None = None,
) -> DecodedEvent:
    """Decode one Kafka record value given its headers (DecodeError: permanent, dead-letter it).

    Avro values resolve the writer schema by fingerprint and read into ``reader_version`` of the
    same event (latest when None); JSON values parse as an object. The returned event type is the
    writer schema's (Avro) or the ``event_type`` header's (JSON).
    """
    from postbox.errors import DecodeError

    meta = EventHeaders.parse(headers)
    if value is None:
        raise DecodeError(f"record has no value (a tombstone){' for ' + meta.event_type if meta.event_type else ''}")
    if is_single_object(value):
        avro = codec if codec is not None else AvroCodec(repository)
        return avro.decode(value, reader_version=reader_version, event_type=meta.event_type)
    return JsonCodec().decode(value, event_type=meta.event_type, aggregate_type=meta.aggregate_type)
