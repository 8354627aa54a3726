"""Records made by a client postbox does not use: kafka-python (pure Python, its own protocol code).

The bad-input catalogue produces its records with it, so what the consumer meets is what another
team's service could really put on the wire, not what our own producer helper happens to build.
"""

from __future__ import annotations

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
