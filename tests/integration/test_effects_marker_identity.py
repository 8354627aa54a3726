"""#12.1 / #12.13: the dedupe marker is a function of the consumer group and the event alone.

Before, its key was anchored on the hash tag of the event's *first effect key*: the same event
redelivered with its effects in another order, with more or fewer keys, or with none the first
time, met no marker and was applied twice (two HINCRBYs swapped: both deliveries APPLIED, counter
2, two markers). Triggers in real life: a deploy between delivery and redelivery, iterating a
``set`` (order changes with PYTHONHASHSEED), effects depending on time or outside state, a DLQ
replay to a group whose handler changed.

Against a real redis-server (the engine's script, not a model of it):

- property: whatever the second delivery's effects are — the first ones permuted, some removed,
  some added, none at all, or unrelated — it is DUPLICATE and no key changes;
- upgrade: markers written under the legacy layout (tag of the first effect key or the event id,
  group unescaped) still make redeliveries duplicates while ``legacy_markers`` is on.
"""

from __future__ import annotations

import itertools
import uuid

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from postbox.effects import Effects, EffectsEngine, EventRef, aggregate_keys
from postbox.errors import TransientEffectError
from postbox.events import Event
from postbox.effects.keys import event_ref
from tests.integration.conftest_effects import fresh_redis, own_redis  # noqa: F401 - fixtures

pytestmark = pytest.mark.integration

#: One command per key type, so any order or subset of them succeeds (no WRONGTYPE by design:
#: the property is about identity, failures are test_effects_property's business).
COMMAND = st.one_of(
    st.tuples(st.just("hincrby"), st.integers(0, 2), st.integers(1, 9)),
    st.tuples(st.just("sadd"), st.integers(0, 2), st.sampled_from(["a", "b", "c"])),
    st.tuples(st.just("incrby"), st.integers(0, 2), st.integers(1, 9)),
    st.tuples(st.just("rpush"), st.integers(0, 2), st.sampled_from(["x", "y"])),
    st.tuples(st.just("zincrby"), st.integers(0, 2), st.integers(1, 9)),
    st.tuples(st.just("other_aggregate"), st.integers(0, 2), st.integers(1, 9)),
)
_counter = itertools.count()


def build(commands: list[tuple], aggregate: str, other: str) -> Effects:
    """Effects over the aggregate's keys (and, for ``other_aggregate``, a key that is NOT in the
    event's slot: allowed on a single server, where the old code anchored the marker on it when
    it came first)."""
    k, o = aggregate_keys("order", aggregate), aggregate_keys("customer", other)
    fx = Effects()
    for op, n, arg in commands:
        if op == "hincrby":
            fx.hincrby(k(f"h{n}"), "paid", arg)
        elif op == "sadd":
            fx.sadd(k(f"s{n}"), arg)
        elif op == "incrby":
            fx.incrby(k(f"n{n}"), arg)
        elif op == "rpush":
            fx.rpush(k(f"l{n}"), arg)
        elif op == "zincrby":
            fx.zincrby(k(f"z{n}"), arg, "m")
        else:
            fx.incrby(o(f"n{n}"), arg)
    return fx


def snapshot(client: redis.Redis, patterns: list[str]) -> dict[bytes, tuple[bytes | None, bool]]:
    """Every key matching the patterns: its serialized value and whether it has a TTL."""
    out = {}
    for pattern in patterns:
        for key in client.scan_iter(match=pattern, count=1000):
            out[key] = (client.dump(key), client.pttl(key) > 0)
    return out


@st.composite
def redelivery(draw):
    """(first effects, second effects): the second a permutation, subset, superset, empty or unrelated."""
    first = draw(st.lists(COMMAND, max_size=6))
    kind = draw(st.sampled_from(["permuted", "removed", "added", "emptied", "unrelated"]))
    if kind == "permuted":
        second = draw(st.permutations(first))
    elif kind == "removed":
        second = [c for c in first if draw(st.booleans())]
    elif kind == "added":
        extra = draw(st.lists(COMMAND, min_size=1, max_size=3))
        second = list(draw(st.permutations(first + extra)))
    elif kind == "emptied":
        second = []
    else:
        second = draw(st.lists(COMMAND, max_size=6))
    return first, list(second)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(delivery=redelivery(), group=st.sampled_from(["billing", "billing:eu", "a%3Ab"]))
def test_redelivery_with_changed_effects_is_a_duplicate_and_changes_nothing(own_redis, delivery, group) -> None:
    first, second = delivery
    client = own_redis.client()
    try:
        n = next(_counter)
        aggregate, other = f"p{n}-{uuid.uuid4().hex[:6]}", f"c{n}-{uuid.uuid4().hex[:6]}"
        event = Event(str(uuid.uuid4()), "order", aggregate, "OrderPaid")
        engine = EffectsEngine(client, group, functions_dir=None)
        assert engine.apply_one(event_ref(event), build(first, aggregate, other)).applied
        # what the runtime asks before dead-lettering a handler failure: found whatever the effects were
        unseen = Event(str(uuid.uuid4()), "order", aggregate, "OrderPaid")
        assert engine.already_applied([event_ref(unseen), event_ref(event)]) == [False, True]
        patterns = [f"*{{order:{aggregate}}}*", f"*{{customer:{other}}}*"]
        before = snapshot(client, patterns)
        again = engine.apply_one(event_ref(event), build(second, aggregate, other))
        assert again.duplicate, (first, second, again)
        assert snapshot(client, patterns) == before
        markers = set(client.scan_iter(match=f"*:seen:*{event.id}", count=1000))
        # the event's marker, and during the upgrade transition the previous release's beside it
        # (not for a group holding ':', whose legacy key another group's event could spell)
        legacy = engine.legacy_marker_key(event_ref(event), build(first, aggregate, other))
        expected = {engine.marker_key(event_ref(event))} | ({legacy} if ":" not in group else set())
        assert markers == expected
    finally:
        client.close()


def test_swapped_commands_reported_in_the_issue_apply_once(own_redis) -> None:
    """The reproduction of #12.1: two HINCRBYs swapped between deliveries (old code: counter 2)."""
    client = own_redis.client()
    a, b = aggregate_keys("order", uuid.uuid4().hex), aggregate_keys("customer", uuid.uuid4().hex)
    engine = EffectsEngine(client, "billing", functions_dir=None)
    ref = EventRef(str(uuid.uuid4()), "order:x")
    assert engine.apply_one(ref, Effects().hincrby(a("t"), "n", 1).hincrby(b("t"), "n", 1)).applied
    assert engine.apply_one(ref, Effects().hincrby(b("t"), "n", 1).hincrby(a("t"), "n", 1)).duplicate
    assert client.hget(a("t"), "n") == client.hget(b("t"), "n") == b"1"
    client.close()


def test_already_applied_with_redis_gone_is_a_transient_error(fresh_redis) -> None:
    """The runtime retries (its partition pauses) instead of dead-lettering blind."""
    client = fresh_redis.client()
    engine = EffectsEngine(client, "billing", functions_dir=None)
    fresh_redis.stop()
    with pytest.raises(TransientEffectError, match="unreachable|cannot reach Redis"):
        engine.already_applied([EventRef(str(uuid.uuid4()), "order:x")])
    client.close()


# -- the upgrade from the legacy layout ------------------------------------------------------------


def legacy_key(group: str, first_key_tag: str, event_id: str) -> str:
    """The marker key as postbox wrote it before this change, spelled out independently of the
    library: ``postbox:{<first effect key's tag, or the event id>}:seen:<group>:<event id>``."""
    return f"postbox:{{{first_key_tag}}}:seen:{group}:{event_id}"


@pytest.mark.parametrize(
    ("group", "keys_of"),
    [
        ("billing", "shard"),      # a handler keyed by another tag than its aggregate (the shop's)
        ("billing:eu", "aggregate"),  # a group whose name the new layout escapes
        ("billing", "none"),       # an event without effects: the legacy tag was the event id
    ],
)
def test_events_marked_under_the_legacy_layout_are_not_applied_again(own_redis, group, keys_of) -> None:
    client = own_redis.client()
    aggregate = uuid.uuid4().hex[:10]
    event_id = str(uuid.uuid4())
    shard = f"shop.pay.{uuid.uuid4().hex[:6]}"
    fx = Effects()
    if keys_of == "shard":
        fx.hincrby(f"{{{shard}}}:totals", "n", 1)
        first_tag = shard
    elif keys_of == "aggregate":
        fx.hincrby(f"{{order:{aggregate}}}:totals", "n", 1)
        first_tag = f"order:{aggregate}"
    else:
        first_tag = event_id
    old = legacy_key(group, first_tag, event_id)
    client.set(old, "1", px=3_600_000)  # applied by the previous version
    ref = EventRef.for_aggregate(event_id, "order", aggregate)

    engine = EffectsEngine(client, group, functions_dir=None)
    assert engine.marker_key(ref).decode() != old  # the layouts differ for these events
    assert engine.apply_one(ref, fx).duplicate
    assert not client.exists(engine.marker_key(ref))
    for key in fx.keys():
        assert not client.exists(key)

    # the transition switched off: the legacy marker is not consulted (what the setting costs to drop)
    fresh = EffectsEngine(client, group, functions_dir=None, legacy_markers=False)
    assert fresh.apply_one(ref, fx).applied
    client.close()


def test_group_and_event_id_holding_colons_do_not_share_a_marker(own_redis) -> None:
    """#12.13: group 'billing:eu' applying event 'x' and group 'billing' applying event 'eu:x' wrote
    the same key ('...:seen:billing:eu:x'), so the second group took its event for a duplicate and
    never applied it. (Event ids may hold ':' under the id rule: printable ASCII without spaces.)"""
    client = own_redis.client()
    agg = uuid.uuid4().hex[:10]
    k = aggregate_keys("order", agg)
    first = EffectsEngine(client, "billing:eu", functions_dir=None)
    second = EffectsEngine(client, "billing", functions_dir=None)
    assert first.apply_one(EventRef.for_aggregate("x", "order", agg), Effects().incrby(k("eu"), 1)).applied
    assert second.apply_one(EventRef.for_aggregate("eu:x", "order", agg), Effects().incrby(k("plain"), 1)).applied
    assert client.get(k("eu")) == client.get(k("plain")) == b"1"
    client.close()
