"""Records made by a client postbox does not use: kafka-python (pure Python, its own protocol code).

The bad-input catalogue produces its records with it, so what the consumer meets is what another
team's service could really put on the wire, not what our own producer helper happens to build.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from kafka import KafkaProducer

Record = tuple["bytes | None", "bytes | None", list[tuple[str, bytes]], "int | None"]


def produce_independently(bootstrap: str, topic: str, records: Iterable[Record], *, max_request_size: int = 1_048_576) -> int:
    """Produce (key, value, headers, partition|None) records with kafka-python (acks=all) and
    wait for each acknowledgement; returns how many were written."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", max_request_size=max_request_size,
                             linger_ms=5, retries=5)
    try:
        futures = [producer.send(topic, key=key, value=value, headers=list(headers), partition=partition)
                   for key, value, headers, partition in records]
        producer.flush(30)
        for future in futures:
            future.get(timeout=30)
        return len(futures)
    finally:
        producer.close(10)


def produce_events_at(bootstrap: str, topic: str, aggregate_type: str, placed: Iterable[tuple[int, int]]) -> list[str]:
    """One router-like ``Counted`` event (payload ``{"seq": i}``, key ``a<i % 4>``) per
    ``(partition, timestamp_ms)`` of ``placed``, with kafka-python and the record's CreateTime set
    (time windows need records at known times); returns the event ids in order."""
    from tests.support.consumers import router_headers

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    ids, futures = [], []
    try:
        for i, (partition, timestamp_ms) in enumerate(placed):
            ids.append(str(uuid.uuid4()))
            futures.append(producer.send(topic, key=f"a{i % 4}".encode(), value=f'{{"seq": {i}}}'.encode(), partition=partition,
                                         headers=router_headers(ids[-1], "Counted", aggregate_type), timestamp_ms=timestamp_ms))  # fmt: skip
        producer.flush(30)
        for future in futures:
            future.get(timeout=30)
    finally:
        producer.close(10)
    return ids
