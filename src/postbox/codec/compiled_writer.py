"""A payload writer compiled once per schema: the check and the Avro encoding in one pass (#17).

Why: an emit used to walk its payload twice, once to check it (:mod:`compiled_check`) and once in
fastavro's ``schemaless_writer``, whose per-call set-up (schema parsing, named-type tables, a file
object, per-field dispatch on the type name) cost more than the encoding itself: together about
12 µs of an order payload, the largest part of an emit's Python. Here each schema node becomes a
closure that checks its value and appends its Avro bytes to one ``bytearray``: about 4 µs.

The writer only ever says "written" for a value it is sure of: one that ``validate`` accepts, and
whose bytes are exactly fastavro's. Anything else (an invalid value, a subclass of a built-in, a
form fastavro reads in its own way such as a tuple in a union, a logical type other than the
timestamps, a union other than ``[null, X]``) makes it answer False, and the codec takes the
general path (compiled check, ``validate`` naming the misfit, fastavro), exactly as before.
Property tests keep both promises (``tests/unit/test_compiled_writer.py``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from postbox.codec.schema_compiler import SchemaCompiler
from postbox.codec.validate import INT_RANGE, LONG_RANGE

#: Appends ``datum``'s Avro encoding to the buffer and returns True, or returns False ("not sure":
#: take the general path; what was appended is then discarded).
Write = Callable[[Any, bytearray], bool]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_PACK_FLOAT = struct.Struct("<f").pack
_PACK_DOUBLE = struct.Struct("<d").pack


def compile_writer(schema: Any, names: Mapping[str, Any]) -> Write:
    """The writer of ``schema`` (fastavro-parsed, with its ``names``)."""
    return _Compiler(names).compile(schema)


def write_long(n: int, out: bytearray) -> None:
    """Avro's zigzag varint of ``n`` (int and long alike). Callers append a value in 0..63 (one
    byte, ``n << 1``) themselves: most lengths, counts and small numbers are, and a call costs more
    than the byte."""
    n = (n << 1) ^ (n >> 63)
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _give_up(datum: Any, out: bytearray) -> bool:
    return False


class _Compiler(SchemaCompiler[Write]):
    def node(self, kind: str, schema: Mapping[str, Any]) -> Write:
        logical = schema.get("logicalType")
        if logical is None:
            return self._kind(kind, schema)
        if logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
            return _timestamp(millis=logical == "timestamp-millis")
        return _give_up  # the other logical types take the general path

    def forward(self, cell: list[Write]) -> Write:
        return lambda datum, out: cell[0](datum, out)

    def _kind(self, kind: str, schema: Mapping[str, Any]) -> Write:
        if kind == "record":
            return self._record(schema)
        if kind == "array":
            return _array(self.compile(schema["items"]))
        if kind == "map":
            return _map(self.compile(schema["values"]))
        if kind == "enum":
            return _enum(schema["symbols"])
        if kind == "fixed":
            return _fixed(schema["size"])
        return _PRIMITIVE.get(kind, _give_up)

    def union(self, branches: list[Any]) -> Write:
        """``[null, X]`` or ``[X, null]`` only: there fastavro's choice of branch is plain (None is
        null, anything else is X); any other union takes the general path."""
        if len(branches) != 2 or "null" not in branches or branches[0] == branches[1]:
            return _give_up
        null_index = branches.index("null")
        null_byte, other_byte = null_index << 1, (1 - null_index) << 1  # the branch index, zigzag
        other = self.compile(branches[1 - null_index])

        def write_union(datum: Any, out: bytearray) -> bool:
            if datum is None:
                out.append(null_byte)
                return True
            if type(datum) is tuple:  # fastavro reads a tuple in a union as (branch name, value)
                return False
            out.append(other_byte)
            return other(datum, out)

        return write_union

    def _record(self, schema: Mapping[str, Any]) -> Write:
        fields = tuple((f["name"], self.compile(f["type"]), self._default(f)) for f in schema["fields"])
        known = frozenset(name for name, _, _ in fields)

        def write_record(datum: Any, out: bytearray) -> bool:
            if type(datum) is not dict or not known.issuperset(datum):
                return False
            for name, write, default in fields:
                # datum[name], not datum.get: a plain dict subscript is the cheaper common case.
                try:
                    value = datum[name]
                except KeyError:
                    if default is None:
                        return False
                    out += default
                    continue
                if not write(value, out):
                    return False
            return True

        return write_record

    def _default(self, field: Mapping[str, Any]) -> bytes | None:
        """The bytes fastavro writes for a missing field (its default through the field's own
        type), or None: no default, or one this writer is not sure of."""
        if "default" not in field:
            return None
        out = bytearray()
        try:
            return bytes(out) if self.compile(field["type"])(field["default"], out) else None
        except Exception:  # noqa: BLE001 - e.g. a default Avro spells as JSON text: general path
            return None


def _timestamp(*, millis: bool) -> Write:
    """timestamp-millis or -micros: an aware datetime, or an int of epoch units, turned into a long
    as fastavro's ``prepare_timestamp_*`` does."""

    def write_timestamp(datum: Any, out: bytearray) -> bool:
        if type(datum) is datetime:
            if datum.tzinfo is None:
                return False
            delta = datum - _EPOCH
            seconds = delta.days * 86400 + delta.seconds
            write_long(seconds * 1000 + delta.microseconds // 1000 if millis else seconds * 1_000_000 + delta.microseconds,
                       out)
            return True
        return _write_long_value(datum, out)

    return write_timestamp


def _array(items: Write) -> Write:
    def write_array(datum: Any, out: bytearray) -> bool:
        kind = type(datum)
        if kind is not list and kind is not tuple:
            return False
        if datum:
            write_long(len(datum), out)
            for item in datum:
                if not items(item, out):
                    return False
        out.append(0)
        return True

    return write_array


def _map(values: Write) -> Write:
    def write_map(datum: Any, out: bytearray) -> bool:
        if type(datum) is not dict:
            return False
        if datum:
            write_long(len(datum), out)
            for key, value in datum.items():
                if not _write_string(key, out) or not values(value, out):
                    return False
        out.append(0)
        return True

    return write_map


def _enum(symbols: list[str]) -> Write:
    index = {symbol: i for i, symbol in enumerate(symbols)}

    def write_enum(datum: Any, out: bytearray) -> bool:
        if type(datum) is not str or datum not in index:
            return False
        write_long(index[datum], out)
        return True

    return write_enum


def _fixed(size: int) -> Write:
    def write_fixed(datum: Any, out: bytearray) -> bool:
        if type(datum) is not bytes or len(datum) != size:
            return False
        out += datum
        return True

    return write_fixed


def _write_null(datum: Any, out: bytearray) -> bool:
    return datum is None


def _write_boolean(datum: Any, out: bytearray) -> bool:
    if datum is True or datum is False:
        out.append(1 if datum else 0)
        return True
    return False


def _integer(low: int, high: int) -> Write:
    def write_integer(datum: Any, out: bytearray) -> bool:
        if type(datum) is not int or not low <= datum <= high:
            return False
        if 0 <= datum < 64:
            out.append(datum << 1)
        else:
            write_long(datum, out)
        return True

    return write_integer


_write_long_value = _integer(*LONG_RANGE)


def _floating(pack: Callable[[float], bytes]) -> Write:
    def write_floating(datum: Any, out: bytearray) -> bool:
        kind = type(datum)
        if kind is not float and kind is not int:
            return False
        out += pack(datum)  # OverflowError (beyond the format's range): the caller's general path
        return True

    return write_floating


def _write_bytes(datum: Any, out: bytearray) -> bool:
    if type(datum) is not bytes:
        return False
    write_long(len(datum), out)
    out += datum
    return True


def _write_string(datum: Any, out: bytearray) -> bool:
    if type(datum) is not str:
        return False
    data = datum.encode()  # a lone surrogate raises: the caller's general path
    size = len(data)
    if size < 64:
        out.append(size << 1)
    else:
        write_long(size, out)
    out += data
    return True


_PRIMITIVE: dict[str, Write] = {
    "null": _write_null,
    "boolean": _write_boolean,
    "int": _integer(*INT_RANGE),
    "long": _write_long_value,
    "float": _floating(_PACK_FLOAT),
    "double": _floating(_PACK_DOUBLE),
    "bytes": _write_bytes,
    "string": _write_string,
}

__all__ = ["Write", "compile_writer", "write_long"]
