"""Hash slots and key naming (no Redis): slots match redis-py's, markers share the event's slot."""

from __future__ import annotations

from datetime import datetime

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.crc import key_slot as redis_py_key_slot

from postbox.effects import Effects, EffectsEngine, InvalidEffectError, aggregate_keys, hash_tag, key_slot
from postbox.effects.keys import KeyLayout, anchor_of, slot_tag
from postbox.events import Event

KEY_BYTES = st.binary(max_size=24) | st.text(alphabet="{}ab:x", max_size=12).map(str.encode)


@given(KEY_BYTES)
def test_slot_matches_redis_py(key: bytes) -> None:
    assert key_slot(key) == redis_py_key_slot(key)


@settings(max_examples=300)
@given(st.lists(KEY_BYTES, min_size=1, max_size=3), st.text(min_size=1, max_size=8), st.text(min_size=1, max_size=8))
def test_marker_and_failure_stream_share_the_first_keys_slot(keys, event_id, group) -> None:
    layout = KeyLayout("postbox", group, slot_aligned=True)
    anchor = anchor_of(keys, event_id.encode())
    slot = key_slot(keys[0])
    assert key_slot(layout.marker(event_id.encode(), anchor)) == slot
    assert key_slot(layout.failures(anchor)) == slot


def test_anchor_of_keys_without_usable_tag() -> None:
    for key in (b"a}b", b"{}x}", b"", b"{", b"}{"):
        assert key_slot(KeyLayout("ns", "g", slot_aligned=True).marker(b"e", anchor_of([key], b"e"))) == key_slot(key)
    assert anchor_of([], b"evt") == b"evt"


def test_slot_tags_cover_every_slot() -> None:
    assert all(key_slot(b"{" + slot_tag(s) + b"}") == s for s in range(0, 16384, 97))


def test_aggregate_keys_and_hash_tag() -> None:
    k = aggregate_keys("order", 42)
    assert k("state") == "{order:42}:state" and k() == "{order:42}" and k.tag == "{order:42}"
    assert key_slot(k("a")) == key_slot(k("b", 7)) == key_slot(b"order:42")
    assert hash_tag("a", 1) == "{a:1}"
    with pytest.raises(InvalidEffectError):
        aggregate_keys("order", "x}y")
    with pytest.raises(InvalidEffectError):
        KeyLayout("bad{ns", "g", slot_aligned=False)


def test_layouts() -> None:
    single = KeyLayout("postbox", "billing", slot_aligned=False)
    cluster = KeyLayout("postbox", "billing", slot_aligned=True)
    assert single.marker(b"e1", b"order:1") == cluster.marker(b"e1", b"order:1") == b"postbox:{order:1}:seen:billing:e1"
    assert single.failures(b"order:1") == b"postbox:failures:billing"
    assert cluster.failures(b"order:1") == b"postbox:{order:1}:failures:billing"
    assert single.failures_pattern() == b"postbox:*failures:billing"


def test_engine_refuses_mixed_slots_before_sending() -> None:
    engine = EffectsEngine(redis.Redis(port=1), "g", functions_dir=None, strict_slots=True)  # never connects
    (result,) = engine.apply([("e1", Effects().set("user:1", 1).set("user:2", 2))])
    assert result.failed and result.cross_slot and result.command_index is None
    assert f"'user:1' → slot {key_slot('user:1')}" in result.error and "hash tag" in result.error
    (unknown,) = engine.apply([("e2", Effects().call("nope", keys=["{a}x"]))])
    assert unknown.failed and unknown.command_index == 0 and "nope" in unknown.error


def test_event_is_frozen_and_needs_an_id() -> None:
    event = Event("id-1", "order", "42", "OrderPaid", {"cents": 1}, {"traceparent": "00-x"}, "outbox.event.order", 0, 5, datetime(2024, 1, 1))
    with pytest.raises(AttributeError):
        event.id = "other"  # type: ignore[misc]
    with pytest.raises(ValueError):
        Event("", "order", "42", "OrderPaid")
