"""The effects builder: what one event changes in Redis, described as data.

A handler receives an :class:`Effects` and calls its methods; nothing touches Redis until the
engine applies the whole description in one Lua call, exactly once per consumer group and all or
nothing::

    def on_order_paid(event, fx):
        k = aggregate_keys("order", event.aggregate_id)
        fx.hset(k("state"), {"status": "paid", "paid_at": event.payload["at"]})
        fx.hincrby(k("totals"), "paid_cents", event.payload["cents"])
        fx.xadd(k("history"), {"type": event.event_type}, maxlen=1000)

Keys, fields and values may be ``str`` (sent as UTF-8) or ``bytes`` (sent verbatim, NUL bytes
included); numbers are sent as their decimal text. Every value travels to Redis as a script
argument, never as part of the script's source, so no value can change what the script does.
``bool``, ``None`` and structures are refused (serialize them yourself, e.g. ``json.dumps``).

Variadic commands with more than :data:`MAX_ITEMS` items are split into several commands of the
same kind (same effect, and the script's stack stays small); failure reports count the split
commands (see :attr:`Effects.commands`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from functools import lru_cache
from typing import NoReturn, Union

from postbox.errors import InvalidEffectError

Key = Union[str, bytes]
Value = Union[str, bytes, int, float, Decimal]

#: Items (fields, members, values) per command; larger calls are split into several commands.
MAX_ITEMS = 1000
#: Commands per event: beyond this the event is refused (it would hold Redis for too long).
MAX_COMMANDS = 10_000
_INT64 = (-(2**63), 2**63 - 1)
#: The apply script's name of each op, as it is written in an event's shape.
_OP_NAMES = {op: op.encode() for op in (
    "hset", "hincrby", "hdel", "set", "incrby", "sadd", "srem", "zadd", "zincrby", "zrem",
    "lpush", "rpush", "xadd", "pexpire", "del", "call",
)}
_HINCRBY_SHAPE = b" hincrby 1 2"
_FUNCTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}\Z")


@dataclass(frozen=True, slots=True)
class EffectCommand:
    """One command of an effect: ``op`` (the script's name for it), its keys and its arguments."""

    op: str
    keys: tuple[bytes, ...]
    args: tuple[bytes, ...]

    def describe(self) -> str:
        """``HSET '{order:1}:state' (4 args)`` — for logs and error messages (no values)."""
        name = self.args[0].decode("utf-8", "replace") if self.op == "call" else self.op.upper()
        keys = " ".join(repr(k.decode("utf-8", "backslashreplace")) for k in self.keys)
        return f"{name} {keys} ({len(self.args)} args)".replace("  ", " ")


class Effects:
    """The Redis changes one event makes. Methods return ``self`` so calls can be chained."""

    __slots__ = ("_shape", "_keys", "_args", "_size", "_functions")

    def __init__(self) -> None:
        # Kept as commands are added, in the form the engine packs (see apply_effects.lua's
        # header), so it never walks the commands of an event again: the shape text of each
        # command (" <op> <key count> <arg count>"), every command's keys and arguments flat in
        # order, how many bytes they hold, and the user functions called (None: none). No object
        # per command is built while a handler runs: :attr:`commands` builds them when asked.
        self._shape: list[bytes] = []
        self._keys: list[bytes] = []
        self._args: list[bytes] = []
        self._size = 0
        self._functions: set[str] | None = None

    # -- inspection ---------------------------------------------------------------------------

    @property
    def commands(self) -> tuple[EffectCommand, ...]:
        """The commands in the order they run; a failure's ``command_index`` points in here."""
        commands: list[EffectCommand] = []
        at_key = at_arg = 0
        for shape in self._shape:
            op, key_count, arg_count = shape.split()
            keys = tuple(self._keys[at_key : at_key + int(key_count)])
            args = tuple(self._args[at_arg : at_arg + int(arg_count)])
            at_key += len(keys)
            at_arg += len(args)
            commands.append(EffectCommand(op.decode(), keys, args))
        return tuple(commands)

    def keys(self) -> list[bytes]:
        """Every key the effects touch, first use first, each once."""
        return list(dict.fromkeys(self._keys))

    def __len__(self) -> int:
        return len(self._shape)

    def __repr__(self) -> str:
        return f"Effects({'; '.join(c.describe() for c in self.commands)})"

    # -- hashes -------------------------------------------------------------------------------

    def hset(self, key: Key, field_or_mapping: Key | Mapping[Key, Value], value: Value | None = None) -> "Effects":
        """HSET: ``hset(key, {field: value, ...})`` or ``hset(key, field, value)``.

        Undo: previous values of the named fields are put back, new fields removed."""
        if type(field_or_mapping) is dict or isinstance(field_or_mapping, Mapping):
            if value is not None:
                raise InvalidEffectError("hset(key, mapping) takes no third argument")
            items = list(field_or_mapping.items())
        else:
            if value is None:
                raise InvalidEffectError("hset(key, field, value): value is missing (None is not a Redis value)")
            items = [(field_or_mapping, value)]
        if not items:
            raise InvalidEffectError("hset: the mapping is empty (nothing to set)")
        k = _bytes(key, "hset key")
        flat = [b for f, v in items for b in (_bytes(f, "hset field"), _value(v, "hset value"))]
        for chunk in _chunks(flat, MAX_ITEMS - MAX_ITEMS % 2):
            self._add("hset", (k,), chunk)
        return self

    def hincrby(self, key: Key, field: Key, amount: int = 1) -> "Effects":
        """HINCRBY by a 64-bit integer. Undo: the field's previous value (or its absence)."""
        # The most common effect, so written out: the same checks as _add's, no list per call, and
        # the common exact types (str key and field, an int in range) encoded without a call each.
        try:
            k = key.encode() if type(key) is str else _bytes(key, "hincrby key")
            f = field.encode() if type(field) is str else _bytes(field, "hincrby field")
        except UnicodeEncodeError:  # text that is not UTF-8 (a lone surrogate): named by _bytes
            k, f = _bytes(key, "hincrby key"), _bytes(field, "hincrby field")
        n = str(amount).encode() if type(amount) is int and _INT64[0] <= amount <= _INT64[1] else _int(amount, "hincrby amount")
        shape = self._shape
        if len(shape) >= MAX_COMMANDS:
            _too_many_commands()
        shape.append(_HINCRBY_SHAPE)
        self._keys.append(k)
        self._args += (f, n)
        self._size += len(k) + len(f) + len(n)
        return self

    def hdel(self, key: Key, *fields: Key) -> "Effects":
        """HDEL. Undo: the removed fields come back, and the key's TTL if deleting emptied it."""
        k = _bytes(key, "hdel key")
        for chunk in _chunks(_nonempty([_bytes(f, "hdel field") for f in fields], "hdel"), MAX_ITEMS):
            self._add("hdel", (k,), chunk)
        return self

    # -- strings ------------------------------------------------------------------------------

    def set(
        self,
        key: Key,
        value: Value,
        *,
        ex: int | timedelta | None = None,
        px: int | timedelta | None = None,
        nx: bool = False,
        xx: bool = False,
        keepttl: bool = False,
    ) -> "Effects":
        """SET with EX/PX (seconds/ms, or a timedelta), NX/XX, KEEPTTL.

        Undo: a DUMP of the key taken first (SET replaces a key of any type)."""
        args = [_value(value, "set value")]
        if sum(x is not None for x in (ex, px)) + keepttl > 1:
            raise InvalidEffectError("set: ex, px and keepttl exclude each other")
        if nx and xx:
            raise InvalidEffectError("set: nx and xx exclude each other")
        if ex is not None:
            args += [b"PX", _positive_ms(ex, "set ex", seconds=True)]
        if px is not None:
            args += [b"PX", _positive_ms(px, "set px", seconds=False)]
        if keepttl:
            args.append(b"KEEPTTL")
        if nx:
            args.append(b"NX")
        if xx:
            args.append(b"XX")
        self._add("set", (_bytes(key, "set key"),), args)
        return self

    def incrby(self, key: Key, amount: int = 1) -> "Effects":
        """INCRBY by a 64-bit integer (TTL kept). Undo: the previous value (or its absence)."""
        self._add("incrby", (_bytes(key, "incrby key"),), [_int(amount, "incrby amount")])
        return self

    # -- sets ---------------------------------------------------------------------------------

    def sadd(self, key: Key, *members: Value) -> "Effects":
        """SADD. Undo: SREM of only the members this command added."""
        k = _bytes(key, "sadd key")
        for chunk in _chunks(_nonempty([_value(m, "sadd member") for m in members], "sadd"), MAX_ITEMS):
            self._add("sadd", (k,), chunk)
        return self

    def srem(self, key: Key, *members: Value) -> "Effects":
        """SREM. Undo: SADD of only the members this command removed (and the TTL)."""
        k = _bytes(key, "srem key")
        for chunk in _chunks(_nonempty([_value(m, "srem member") for m in members], "srem"), MAX_ITEMS):
            self._add("srem", (k,), chunk)
        return self

    # -- sorted sets --------------------------------------------------------------------------

    def zadd(
        self,
        key: Key,
        mapping: Mapping[Value, float | int | Decimal],
        *,
        nx: bool = False,
        xx: bool = False,
        gt: bool = False,
        lt: bool = False,
        ch: bool = False,
    ) -> "Effects":
        """ZADD ``{member: score}`` with NX/XX/GT/LT/CH. Undo: previous scores back, new members out."""
        if not mapping:
            raise InvalidEffectError("zadd: the mapping is empty (nothing to add)")
        if nx and (xx or gt or lt):
            raise InvalidEffectError("zadd: nx excludes xx, gt and lt")
        if gt and lt:
            raise InvalidEffectError("zadd: gt and lt exclude each other")
        options = [name for name, on in ((b"NX", nx), (b"XX", xx), (b"GT", gt), (b"LT", lt), (b"CH", ch)) if on]
        k = _bytes(key, "zadd key")
        flat = [b for m, s in mapping.items() for b in (_score(s, "zadd score"), _value(m, "zadd member"))]
        for chunk in _chunks(flat, MAX_ITEMS - MAX_ITEMS % 2):
            self._add("zadd", (k,), [str(len(options)).encode(), *options, *chunk])
        return self

    def zincrby(self, key: Key, amount: float | int | Decimal, member: Value) -> "Effects":
        """ZINCRBY. Undo: the member's previous score (or its absence)."""
        self._add("zincrby", (_bytes(key, "zincrby key"),), [_score(amount, "zincrby amount"), _value(member, "zincrby member")])
        return self

    def zrem(self, key: Key, *members: Value) -> "Effects":
        """ZREM. Undo: removed members back with their scores (and the TTL)."""
        k = _bytes(key, "zrem key")
        for chunk in _chunks(_nonempty([_value(m, "zrem member") for m in members], "zrem"), MAX_ITEMS):
            self._add("zrem", (k,), chunk)
        return self

    # -- lists and streams --------------------------------------------------------------------

    def lpush(self, key: Key, *values: Value) -> "Effects":
        """LPUSH. Undo: LPOP as many values."""
        k = _bytes(key, "lpush key")
        for chunk in _chunks(_nonempty([_value(v, "lpush value") for v in values], "lpush"), MAX_ITEMS):
            self._add("lpush", (k,), chunk)
        return self

    def rpush(self, key: Key, *values: Value) -> "Effects":
        """RPUSH. Undo: RPOP as many values."""
        k = _bytes(key, "rpush key")
        for chunk in _chunks(_nonempty([_value(v, "rpush value") for v in values], "rpush"), MAX_ITEMS):
            self._add("rpush", (k,), chunk)
        return self

    def xadd(self, key: Key, fields: Mapping[Key, Value], *, maxlen: int | None = None, id: str = "*") -> "Effects":
        """XADD an entry (id ``*`` = server time). ``maxlen`` caps the stream approximately
        (MAXLEN ~): the trim runs only once every command of the event has succeeded, because
        trimmed entries could not be put back. Undo: XDEL of the entry and XSETID to the stream's
        previous id counters (or DEL if the stream did not exist)."""
        if not fields:
            raise InvalidEffectError("xadd: fields are empty (a stream entry needs at least one field)")
        flat = [b for f, v in fields.items() for b in (_bytes(f, "xadd field"), _value(v, "xadd value"))]
        if len(flat) > MAX_ITEMS:
            raise InvalidEffectError(f"xadd: {len(flat) // 2} fields in one entry; at most {MAX_ITEMS // 2}")
        cap = b"" if maxlen is None else _count(maxlen, "xadd maxlen")
        self._add("xadd", (_bytes(key, "xadd key"),), [cap, _bytes(id, "xadd id"), *flat])
        return self

    # -- keys ---------------------------------------------------------------------------------

    def expire(self, key: Key, ttl: int | float | timedelta) -> "Effects":
        """Set a TTL (seconds, or a timedelta; sent as PEXPIRE ms). Must be positive: use
        :meth:`delete` to remove a key. Undo: the previous TTL (or none)."""
        self._add("pexpire", (_bytes(key, "expire key"),), [_positive_ms(ttl, "expire ttl", seconds=True)])
        return self

    def delete(self, *keys: Key) -> "Effects":
        """DEL. Undo: a DUMP of each key taken first (costly for big keys)."""
        ks = _nonempty([_bytes(k, "delete key") for k in keys], "delete")
        for chunk in _chunks(ks, MAX_ITEMS):
            self._add("del", tuple(chunk), [])
        return self

    # -- user effect functions ----------------------------------------------------------------

    def call(self, function: str, keys: Sequence[Key] = (), args: Sequence[Value] = ()) -> "Effects":
        """Run the user effect function ``consumers/lua/<function>.lua`` with ``KEYS``/``ARGV``.

        The function runs inside the same script call as the other effects. Every key it touches
        must be in ``keys`` (they are snapshotted with DUMP first so a failure can be undone, and on
        Redis Cluster they decide the slot). It fails by raising an error (``redis.call`` failing,
        ``error(...)``) or returning ``redis.error_reply(...)``."""
        if not isinstance(function, str) or not _FUNCTION_NAME.match(function):
            raise InvalidEffectError(
                f"call: {function!r} is not an effect function name",
                fix="name the file consumers/lua/<name>.lua with letters, digits and '_' (not starting with a digit)",
            )
        if isinstance(keys, (str, bytes)) or isinstance(args, (str, bytes)):
            raise InvalidEffectError("call: keys and args are sequences (wrap a single key in a list)")
        ks = tuple(_bytes(k, "call key") for k in keys)
        vs = [_value(a, "call arg") for a in args]
        if len(ks) + len(vs) > MAX_ITEMS:
            raise InvalidEffectError(f"call {function}: {len(ks) + len(vs)} keys and args; at most {MAX_ITEMS}")
        self._add("call", ks, [function.encode(), *vs])
        return self

    def _add(self, op: str, keys: Sequence[bytes], args: Sequence[bytes]) -> None:
        shape = self._shape
        if len(shape) >= MAX_COMMANDS:
            _too_many_commands()
        shape.append(_shape_of(op, len(keys), len(args)))
        self._keys += keys
        self._args += args
        self._size += sum(map(len, keys)) + sum(map(len, args))
        if op == "call":
            self._functions = (self._functions or set()) | {args[0].decode()}


def _too_many_commands() -> NoReturn:
    raise InvalidEffectError(
        f"more than {MAX_COMMANDS} commands in one event's effects",
        fix="split the work over several events, or use a user effect function (fx.call)",
    )


@lru_cache(maxsize=4096)
def _shape_of(op: str, key_count: int, arg_count: int) -> bytes:
    """A command's shape text (apply_effects.lua's header); few distinct ones, so kept."""
    return b" %b %d %d" % (_OP_NAMES[op], key_count, arg_count)


# -- encoding ---------------------------------------------------------------------------------


def _bytes(value: object, what: str) -> bytes:
    if type(value) is str:  # the common case first (a subclass takes the checks below)
        try:
            return value.encode()
        except UnicodeEncodeError:
            pass  # named below
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidEffectError(f"{what}: {value!r} is not valid UTF-8 text ({exc.reason}); pass bytes") from None
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise InvalidEffectError(f"{what}: expected str or bytes, got {type(value).__name__} ({value!r:.60})")


def _value(value: object, what: str) -> bytes:
    # The common exact types first, without a call (a subclass, bool included, takes the checks below).
    if type(value) is str:
        try:
            return value.encode()
        except UnicodeEncodeError:
            pass  # named by _bytes below
    elif type(value) is bytes:
        return value
    elif type(value) is int:
        return str(value).encode()
    if isinstance(value, (bytes, str, bytearray, memoryview)):
        return _bytes(value, what)
    if isinstance(value, bool):
        raise InvalidEffectError(f"{what}: {value!r} is ambiguous in Redis; pass 1/0 or 'true'/'false'")
    if isinstance(value, int):
        return str(value).encode()
    if isinstance(value, (float, Decimal)):
        if not math.isfinite(value):
            raise InvalidEffectError(f"{what}: {value!r} is not a finite number")
        return (repr(value) if isinstance(value, float) else str(value)).encode()
    raise InvalidEffectError(
        f"{what}: {type(value).__name__} is not a Redis value ({value!r:.60})",
        fix="pass str, bytes, int or float; serialize structures yourself (e.g. json.dumps)",
    )


def _int(value: object, what: str) -> bytes:
    if type(value) is int and _INT64[0] <= value <= _INT64[1]:  # the common case (bool is not int here)
        return str(value).encode()
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidEffectError(f"{what}: expected an int, got {type(value).__name__} ({value!r:.60})")
    if not _INT64[0] <= value <= _INT64[1]:
        raise InvalidEffectError(f"{what}: {value} does not fit a signed 64-bit integer")
    return str(value).encode()


def _count(value: object, what: str) -> bytes:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidEffectError(f"{what}: expected a non-negative int, got {value!r:.60}")
    return str(value).encode()


def _score(value: object, what: str) -> bytes:
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        raise InvalidEffectError(f"{what}: expected a number, got {type(value).__name__} ({value!r:.60})")
    if isinstance(value, float):
        if math.isnan(value):
            raise InvalidEffectError(f"{what}: NaN is not a score")
        return b"+inf" if value == math.inf else b"-inf" if value == -math.inf else repr(value).encode()
    if isinstance(value, Decimal) and not value.is_finite():
        raise InvalidEffectError(f"{what}: {value} is not a finite score")
    return str(value).encode()


def _positive_ms(value: object, what: str, *, seconds: bool) -> bytes:
    if isinstance(value, timedelta):
        ms = value / timedelta(milliseconds=1)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        ms = value * 1000 if seconds else value
    else:
        raise InvalidEffectError(f"{what}: expected {'seconds' if seconds else 'milliseconds'} or a timedelta, got {value!r:.60}")
    if not math.isfinite(ms) or round(ms) < 1:
        raise InvalidEffectError(f"{what}: {value!r} is not a positive duration (use delete() to remove a key)")
    if round(ms) > _INT64[1] // 2:
        raise InvalidEffectError(f"{what}: {value!r} is too long")
    return str(round(ms)).encode()


def _nonempty(items: list[bytes], what: str) -> list[bytes]:
    if not items:
        raise InvalidEffectError(f"{what}: nothing given (at least one item)")
    return items


def _chunks(items: list[bytes], size: int) -> Iterable[list[bytes]]:
    if len(items) <= size:  # the common case: one command, no list of slices
        return (items,) if items else ()
    return [items[start : start + size] for start in range(0, len(items), size)]
