"""`postbox up` formats Kafka's storage with a cluster id made the way Kafka makes one
(``Uuid.randomUuid()``): 16 random bytes as unpadded URL-safe base64, re-drawn while it starts
with ``-`` (the storage tool would read it as a flag) or is one of the two reserved ids."""

from __future__ import annotations

import base64
import uuid

from hypothesis import given, strategies as st

from postbox.stack.kafka import new_cluster_id

RESERVED = {bytes(16), bytes(15) + b"\x01"}  # Uuid.ZERO_UUID, Uuid.METADATA_TOPIC_ID


def _decoded(cluster_id: str) -> bytes:
    return base64.urlsafe_b64decode(cluster_id + "==")


def test_ten_thousand_ids_are_valid_kafka_ids():
    ids = [new_cluster_id() for _ in range(10_000)]
    assert not [i for i in ids if i.startswith("-")]
    assert {len(i) for i in ids} == {22}
    assert all(len(_decoded(i)) == 16 and _decoded(i) not in RESERVED for i in ids)
    assert len(set(ids)) == len(ids)


@given(st.lists(st.binary(min_size=16, max_size=16), min_size=1, max_size=8))
def test_a_draw_that_would_start_with_a_dash_or_is_reserved_is_drawn_again(draws):
    valid = [d for d in draws if not base64.urlsafe_b64encode(d).startswith(b"-") and d not in RESERVED]
    source = iter(draws + [uuid.UUID(int=1 << 100).bytes])
    made = new_cluster_id(lambda: next(source))
    expected = valid[0] if valid else uuid.UUID(int=1 << 100).bytes
    assert _decoded(made) == expected and not made.startswith("-")


def test_a_leading_dash_is_what_is_refused():
    dash = b"\xf8" + bytes(15)  # base64 "-A..."
    assert base64.urlsafe_b64encode(dash).startswith(b"-")
    source = iter([dash, b"\x04" + bytes(15)])
    assert new_cluster_id(lambda: next(source)) == base64.urlsafe_b64encode(b"\x04" + bytes(15)).decode().rstrip("=")
