"""Hash slots and key naming (no Redis): slots match redis-py's, markers share the event's slot."""

from __future__ import annotations

from datetime import datetime

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.crc import key_slot as redis_py_key_slot

from postbox.effects import EffectConfigError, Effects, EffectsEngine, EventRef, InvalidEffectError, aggregate_keys, event_ref, hash_tag, key_slot
from postbox.effects.keys import MAX_TAG_BYTES, KeyLayout, legacy_anchor, slot_tag, tag_text
from postbox.events import Event

KEY_BYTES = st.binary(max_size=24) | st.text(alphabet="{}ab:x", max_size=12).map(str.encode)


@given(KEY_BYTES)
def test_slot_matches_redis_py(key: bytes) -> None:
    assert key_slot(key) == redis_py_key_slot(key)


@settings(max_examples=300)
@given(st.text(max_size=40), st.text(min_size=1, max_size=8), st.text(min_size=1, max_size=8))
def test_marker_and_failure_stream_share_the_routing_tags_slot(tag, event_id, group) -> None:
    """Whatever the routing tag holds (braces, nothing), marker and stream land in ``{tag}``'s slot."""
    layout = KeyLayout("postbox", group, slot_aligned=True)
    slot = key_slot(b"{" + tag.encode() + b"}") if tag and "}" not in tag else key_slot(b"{%s}" % tag_text(tag))
    assert slot == EventRef(event_id, tag).slot
    if tag and "}" not in tag:
        assert slot == key_slot(tag.encode())  # the slot of the text itself, as a {tag} key has
    assert key_slot(layout.marker(event_id.encode(), tag.encode())) == slot
    assert key_slot(layout.failures(tag.encode())) == slot


def test_unusable_routing_tags_keep_their_slot_with_a_short_tag() -> None:
    """Empty, '}'-holding or huge tags (a 2 MB aggregate id) become the slot's canonical tag."""
    huge = "order:" + "x" * 2_000_000
    for text in ("", "a}b", "}", huge):  # none holds '{': the slot of the text is key_slot(text)
        short = tag_text(text)
        assert len(short) <= 5 and b"}" not in short
        assert key_slot(b"{" + short + b"}") == key_slot(text.encode())
    assert tag_text("x" * MAX_TAG_BYTES) == b"x" * MAX_TAG_BYTES
    marker = KeyLayout("postbox", "g", slot_aligned=True).marker(b"e1", huge.encode())
    assert len(marker) < 64 and key_slot(marker) == key_slot(huge.encode())


def test_marker_is_a_function_of_group_and_event_only() -> None:
    """#12.1: the marker key takes no effects; by default the aggregate's tag, as aggregate_keys makes it."""
    event = Event("e-1", "order", "42", "OrderPaid")
    ref = event_ref(event)
    assert ref == EventRef("e-1", "order:42")
    engine = EffectsEngine(redis.Redis(port=1), "billing", functions_dir=None)  # never connects
    assert engine.marker_key(ref) == b"postbox:{order:42}:seen:billing:e-1"
    assert key_slot(engine.marker_key(ref)) == key_slot(aggregate_keys("order", 42)("state"))
    routed = event_ref(event, lambda e: aggregate_keys("customer", 7)("orders"))
    assert routed == EventRef("e-1", "customer:7")
    assert EventRef.routed("e-1", "plain-key").slot == key_slot("plain-key")
    with pytest.raises(InvalidEffectError, match="routing key"):
        event_ref(event, lambda e: "")


def test_group_and_id_with_colons_no_longer_collide() -> None:
    """#12.13: group 'a:b' + id 'c' and group 'a' + id 'b:c' made the same key ('seen:a:b:c')."""
    one = KeyLayout("postbox", "a:b", slot_aligned=False)
    two = KeyLayout("postbox", "a", slot_aligned=False)
    assert one.legacy_marker(b"c", b"t") == two.legacy_marker(b"b:c", b"t")  # the old ambiguity
    assert one.marker(b"c", b"t") != two.marker(b"b:c", b"t")
    assert one.marker(b"c", b"t") == b"postbox:{t}:seen:a%3Ab:c"
    assert KeyLayout("postbox", "a%3Ab", slot_aligned=False).marker(b"c", b"t") == b"postbox:{t}:seen:a%253Ab:c"
    # a plain group keeps the legacy spelling, so its markers need no transition at all
    plain = KeyLayout("postbox", "billing", slot_aligned=False)
    assert plain.marker(b"e", b"order:1") == plain.legacy_marker(b"e", b"order:1")


@settings(max_examples=300)
@given(st.text(max_size=6, alphabet="ab:%"), st.text(min_size=1, max_size=6, alphabet="ab:%"),
       st.text(max_size=6, alphabet="ab:%"), st.text(min_size=1, max_size=6, alphabet="ab:%"))
def test_distinct_group_and_id_pairs_give_distinct_markers(g1, i1, g2, i2) -> None:
    if not g1 or not g2 or (g1, i1) == (g2, i2):
        return
    m1 = KeyLayout("postbox", g1, slot_aligned=False).marker(i1.encode(), b"t")
    m2 = KeyLayout("postbox", g2, slot_aligned=False).marker(i2.encode(), b"t")
    assert m1 != m2


def test_legacy_anchor_of_keys_without_usable_tag() -> None:
    for key in (b"a}b", b"{}x}", b"", b"{", b"}{"):
        assert key_slot(KeyLayout("ns", "g", slot_aligned=True).legacy_marker(b"e", legacy_anchor([key], b"e"))) == key_slot(key)
    assert legacy_anchor([], b"evt") == b"evt"


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


def test_engine_refuses_keys_outside_the_events_slot_before_sending() -> None:
    engine = EffectsEngine(redis.Redis(port=1), "g", functions_dir=None, strict_slots=True)  # never connects
    ref = EventRef("e1", "user:1")
    (result,) = engine.apply([(ref, Effects().set("user:1", 1).set("user:2", 2))])
    assert result.failed and result.cross_slot and result.command_index is None
    assert f"'user:2' → slot {key_slot('user:2')}" in result.error and "hash tag" in result.error
    assert f"expected slot {key_slot('user:1')}" in result.error and "'user:1' →" not in result.error
    with pytest.raises(EffectConfigError, match="'nope' has no file nope.lua"):  # #12.9: the deployment, not the event
        engine.apply([(EventRef("e2", "a"), Effects().call("nope", keys=["{a}x"]))])
    with pytest.raises(InvalidEffectError, match="EventRef"):
        engine.apply([("e3", Effects())])  # type: ignore[list-item]


def test_event_is_frozen_and_needs_an_id() -> None:
    event = Event("id-1", "order", "42", "OrderPaid", {"cents": 1}, {"traceparent": "00-x"}, "outbox.event.order", 0, 5, datetime(2024, 1, 1))
    with pytest.raises(AttributeError):
        event.id = "other"  # type: ignore[misc]
    with pytest.raises(ValueError):
        Event("", "order", "42", "OrderPaid")
