"""The effects builder: encoding, validation and splitting (no Redis)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from postbox.effects import MAX_COMMANDS, MAX_ITEMS, Effects, InvalidEffectError


def test_hset_forms_and_number_encoding() -> None:
    fx = Effects().hset("k", {"a": 1, b"b": 2.5, "c": Decimal("1.10"), "d": b"\x00raw"}).hset("k", "e", -7)
    assert [c.op for c in fx.commands] == ["hset", "hset"]
    assert fx.commands[0].keys == (b"k",)
    assert fx.commands[0].args == (b"a", b"1", b"b", b"2.5", b"c", b"1.10", b"d", b"\x00raw")
    assert fx.commands[1].args == (b"e", b"-7")


@pytest.mark.parametrize("bad", [True, None, {"x": 1}, [1], float("nan"), float("inf"), object()])
def test_values_refused_with_a_clear_reason(bad) -> None:
    with pytest.raises(InvalidEffectError) as err:
        Effects().sadd("k", bad)
    assert "sadd member" in str(err.value)


def test_lone_surrogate_text_is_refused() -> None:
    with pytest.raises(InvalidEffectError, match="UTF-8"):
        Effects().set("k", "\udc80")


@pytest.mark.parametrize(("key", "field", "named"), [("\udc80", "f", "hincrby key"), ("k", "\udc80", "hincrby field")])
def test_hincrby_names_the_text_that_is_not_utf8(key: str, field: str, named: str) -> None:
    with pytest.raises(InvalidEffectError, match=f"{named}: .* is not valid UTF-8"):
        Effects().hincrby(key, field, 1)


def test_chaining_keys_and_len() -> None:
    fx = Effects().set("a", 1).sadd("b", 1).hincrby("a", "f").delete("c", "a")
    assert len(fx) == 4
    assert fx.keys() == [b"a", b"b", b"c"]
    assert "SADD 'b'" in repr(fx)


def test_set_options() -> None:
    assert Effects().set("k", "v", ex=10).commands[0].args == (b"v", b"PX", b"10000")
    assert Effects().set("k", "v", px=timedelta(seconds=1.5), nx=True).commands[0].args == (b"v", b"PX", b"1500", b"NX")
    assert Effects().set("k", "v", keepttl=True, xx=True).commands[0].args == (b"v", b"KEEPTTL", b"XX")
    for kwargs in ({"ex": 1, "px": 1}, {"ex": 1, "keepttl": True}, {"nx": True, "xx": True}, {"ex": 0}, {"px": -5}):
        with pytest.raises(InvalidEffectError):
            Effects().set("k", "v", **kwargs)


def test_integers_are_64_bit() -> None:
    Effects().incrby("k", 2**63 - 1).hincrby("h", "f", -(2**63))
    for bad in (2**63, True, 1.5, "3"):
        with pytest.raises(InvalidEffectError):
            Effects().incrby("k", bad)


def test_zadd_options_and_scores() -> None:
    fx = Effects().zadd("z", {"a": 1, "b": float("inf"), "c": -0.5}, gt=True, ch=True)
    assert fx.commands[0].args == (b"2", b"GT", b"CH", b"1", b"a", b"+inf", b"b", b"-0.5", b"c")
    for kwargs in ({"nx": True, "xx": True}, {"gt": True, "lt": True}, {"nx": True, "gt": True}):
        with pytest.raises(InvalidEffectError):
            Effects().zadd("z", {"a": 1}, **kwargs)
    with pytest.raises(InvalidEffectError, match="NaN"):
        Effects().zadd("z", {"a": float("nan")})


def test_xadd_expire_delete_call() -> None:
    fx = Effects().xadd("s", {"f": "v"}, maxlen=100).xadd("s", {"f": 1}).expire("k", timedelta(minutes=1)).expire("k", 0.5)
    assert fx.commands[0].args == (b"100", b"*", b"f", b"v")
    assert fx.commands[1].args[:2] == (b"", b"*")
    assert fx.commands[2].op == "pexpire" and fx.commands[2].args == (b"60000",)
    assert fx.commands[3].args == (b"500",)
    with pytest.raises(InvalidEffectError, match="delete"):
        Effects().expire("k", 0)
    call = Effects().call("reserve_stock", keys=["a", b"b"], args=["x", 2]).commands[0]
    assert (call.op, call.keys, call.args) == ("call", (b"a", b"b"), (b"reserve_stock", b"x", b"2"))
    assert call.describe().startswith("reserve_stock 'a' 'b'")
    for name in ("1bad", "has space", "x" * 65, "", "dot.lua"):
        with pytest.raises(InvalidEffectError):
            Effects().call(name)
    with pytest.raises(InvalidEffectError, match="sequences"):
        Effects().call("f", keys="single")


def test_empty_calls_refused() -> None:
    for build in (
        lambda fx: fx.hset("k", {}),
        lambda fx: fx.sadd("k"),
        lambda fx: fx.hdel("k"),
        lambda fx: fx.delete(),
        lambda fx: fx.xadd("s", {}),
        lambda fx: fx.zadd("z", {}),
        lambda fx: fx.hset("k", "field"),
    ):
        with pytest.raises(InvalidEffectError):
            build(Effects())


def test_big_variadic_commands_are_split() -> None:
    fx = Effects().sadd("s", *range(2500)).hset("h", {str(i): i for i in range(1200)})
    ops = [(c.op, len(c.args)) for c in fx.commands]
    assert ops == [("sadd", MAX_ITEMS), ("sadd", MAX_ITEMS), ("sadd", 500), ("hset", MAX_ITEMS), ("hset", MAX_ITEMS), ("hset", 400)]
    with pytest.raises(InvalidEffectError, match="fields"):
        Effects().xadd("s", {str(i): i for i in range(MAX_ITEMS)})


def test_too_many_commands() -> None:
    fx = Effects()
    for _ in range(MAX_COMMANDS):
        fx.incrby("k", 1)
    with pytest.raises(InvalidEffectError, match="more than"):
        fx.incrby("k", 1)
