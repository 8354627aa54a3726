"""#14.2 (the handler's Effects): the builder keeps an event's commands flat, in the form the
engine packs (each command's shape, every key, every argument, their byte count), and builds the
:class:`EffectCommand` objects only when asked (``commands``, ``repr``, a failure's description).

What a user relies on: ``fx.commands`` (the test harness, failure messages naming the command)
reads back exactly the calls made, in order; a call refused for a bad argument adds nothing, so
the effects built before it are intact; the key maker of ``aggregate_keys`` makes the documented
keys. Shown to fail (scratch edits): with hincrby's shape written ``" hincrby 1 1"`` the
round-trip property fails on its first example; with the byte count of a command left out of
``_size`` the size property fails; with ``_bytes``' str fast path returning ``b""`` for text it
cannot encode, the surrogate test fails (no error).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import pytest

from postbox.effects import Effects, InvalidEffectError, aggregate_keys
from postbox.effects.builder import EffectCommand

safe_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=8)
keys = st.one_of(safe_text, st.binary(min_size=1, max_size=8))
values = st.one_of(safe_text, st.binary(max_size=8), st.integers(-(2**63), 2**63 - 1))
ints = st.integers(-(2**63), 2**63 - 1)

# (method name, strategy of its arguments, the command(s) it should produce)
CALLS = st.one_of(
    st.tuples(st.just("hincrby"), st.tuples(keys, keys, ints)),
    st.tuples(st.just("hset"), st.tuples(keys, st.dictionaries(keys, values, min_size=1, max_size=3))),
    st.tuples(st.just("incrby"), st.tuples(keys, ints)),
    st.tuples(st.just("sadd"), st.tuples(keys, values, values)),
    st.tuples(st.just("delete"), st.tuples(keys, keys)),
    st.tuples(st.just("set"), st.tuples(keys, values)),
    st.tuples(st.just("zincrby"), st.tuples(keys, st.integers(-1000, 1000), values)),
    st.tuples(st.just("rpush"), st.tuples(keys, values)),
    st.tuples(st.just("call"), st.tuples(st.just("f_1"), st.lists(keys, max_size=2), st.lists(values, max_size=2))),
)


def _b(x: object) -> bytes:
    return x if isinstance(x, bytes) else str(x).encode()


def _expected(name: str, args: tuple) -> EffectCommand:
    """The command one call makes, written out independently of the builder."""
    if name == "hincrby":
        return EffectCommand("hincrby", (_b(args[0]),), (_b(args[1]), _b(args[2])))
    if name == "hset":
        return EffectCommand("hset", (_b(args[0]),), tuple(b for f, v in args[1].items() for b in (_b(f), _b(v))))
    if name == "incrby":
        return EffectCommand("incrby", (_b(args[0]),), (_b(args[1]),))
    if name == "sadd":
        return EffectCommand("sadd", (_b(args[0]),), (_b(args[1]), _b(args[2])))
    if name == "delete":
        return EffectCommand("del", (_b(args[0]), _b(args[1])), ())
    if name == "set":
        return EffectCommand("set", (_b(args[0]),), (_b(args[1]),))
    if name == "zincrby":
        return EffectCommand("zincrby", (_b(args[0]),), (_b(args[1]), _b(args[2])))
    if name == "rpush":
        return EffectCommand("rpush", (_b(args[0]),), (_b(args[1]),))
    assert name == "call"
    return EffectCommand("call", tuple(_b(k) for k in args[1]), (b"f_1", *(_b(v) for v in args[2])))


@settings(max_examples=150, deadline=None)
@given(st.lists(CALLS, max_size=8))
def test_commands_read_back_the_calls_made_and_the_packing_totals_agree(calls) -> None:
    fx = Effects()
    for name, args in calls:
        getattr(fx, name)(*args)
    expected = [_expected(name, args) for name, args in calls]
    assert list(fx.commands) == expected
    assert len(fx) == len(expected)
    # What the engine packs: keys and arguments flat in command order, and their bytes.
    assert fx._keys == [k for c in expected for k in c.keys]
    assert fx._args == [a for c in expected for a in c.args]
    assert fx._size == sum(len(b) for c in expected for b in (*c.keys, *c.args))
    assert [s.split()[0].decode() for s in fx._shape] == [c.op for c in expected]
    assert fx.keys() == list(dict.fromkeys(k for c in expected for k in c.keys))
    assert (fx._functions is not None) == any(c.op == "call" for c in expected)


@pytest.mark.parametrize(
    "build, named",
    [
        (lambda fx: fx.hincrby("k", "f", 2**63), "hincrby amount"),
        (lambda fx: fx.hincrby("k", "f", True), "hincrby amount"),
        (lambda fx: fx.hincrby("\udc80", "f", 1), "hincrby key"),
        (lambda fx: fx.hincrby("k", 7, 1), "hincrby field"),
        (lambda fx: fx.hset("k", {"a": 1, "b": None}), "hset value"),
        (lambda fx: fx.sadd("k", "a", float("nan")), "sadd member"),
        (lambda fx: fx.delete("a", 3), "delete key"),
        (lambda fx: fx.call("f", keys=["a", None]), "call key"),
    ],
)
def test_a_refused_call_names_its_argument_and_adds_nothing(build, named) -> None:
    fx = Effects().hincrby("{o:1}:totals", "cents", 5)
    before = (fx.commands, fx._keys[:], fx._args[:], fx._size, fx._shape[:])
    with pytest.raises(InvalidEffectError) as err:
        build(fx)
    assert str(err.value).startswith(named)
    assert (fx.commands, fx._keys, fx._args, fx._size, fx._shape) == before


def test_the_key_maker_makes_the_documented_keys() -> None:
    k = aggregate_keys("order", 42)
    assert k("state") == "{order:42}:state"
    assert k() == "{order:42}" == k.tag
    assert k("item", 3) == "{order:42}:item:3"
    with pytest.raises(InvalidEffectError, match="hash tag"):
        aggregate_keys("order", "a}b")
