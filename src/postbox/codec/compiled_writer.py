"""A payload writer compiled once per schema: the check and the Avro encoding in one pass.

Why: an emit used to walk its payload twice, once to check it (:mod:`compiled_check`) and once in
fastavro's ``schemaless_writer``, whose per-call set-up (schema parsing, named-type tables, a file
object, per-field dispatch on the type name) cost more than the encoding itself. Here a schema
becomes the source of one Python function that checks each value and appends its Avro bytes to
one ``bytearray``, every field of a record (and of the records nested in it) inline: no call, no
dispatch per value, which matters most to a batch, where it runs once per event. Named types
referred to by name (recursive ones, and any named type met again) get a function of their own.

The writer only ever says "written" for a value it is sure of: one that ``validate`` accepts, and
whose bytes are exactly fastavro's. Anything else (an invalid value, a subclass of a built-in, a
form fastavro reads in its own way such as a tuple in a union, a logical type other than the
timestamps, a union other than ``[null, X]``) makes it answer False, and the codec takes the
general path (compiled check, ``validate`` naming the misfit, fastavro), exactly as before.
Property tests keep both promises (``tests/unit/test_compiled_writer.py``).

The generated source holds no value of the schema but its field names (as literals, through
``repr``); symbols, sizes, defaults and ranges are constants of the function's namespace.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from postbox.codec.validate import INT_RANGE, LONG_RANGE, PRIMITIVES

#: Appends ``datum``'s Avro encoding to the buffer and returns True, or returns False ("not sure":
#: take the general path; what was appended is then discarded).
Write = Callable[[Any, bytearray], bool]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: How deep values are written inline; a deeper node gets a function of its own (Python's parser
#: takes at most 100 levels of indentation and 20 nested loops).
_MAX_INLINE_DEPTH = 12


def compile_writer(schema: Any, names: Mapping[str, Any]) -> Write:
    """The writer of ``schema`` (fastavro-parsed, with its ``names``). A schema it cannot turn
    into source gets a writer that is never sure: all its payloads take the general path."""
    try:
        return _Generator(names).writer(schema)
    except Exception:  # noqa: BLE001 - the general path is always right, only slower
        return _never_sure


def _never_sure(datum: Any, out: bytearray) -> bool:
    return False


def write_long(n: int, out: bytearray) -> None:
    """Avro's zigzag varint of ``n`` (int and long alike). The generated code appends a value in
    0..63 (one byte, ``n << 1``) itself: most lengths, counts and small numbers are, and a call
    costs more than the byte."""
    n = (n << 1) ^ (n >> 63)
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


@functools.cache
def _varint_tables() -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
    """The Avro bytes of every 14-bit piece of a zigzag varint: as its last piece (one or two
    bytes), and as a piece followed by more (two bytes, both with the continuation bit). One
    lookup writes what the loop of :func:`write_long` writes in two turns; made at the first
    writer compiled (about 1.4 MB), so a process that never emits never holds them."""
    last = tuple(bytes((z,)) if z < 0x80 else bytes((z & 0x7F | 0x80, z >> 7)) for z in range(1 << 14))
    more = tuple(bytes((z & 0x7F | 0x80, z >> 7 | 0x80)) for z in range(1 << 14))
    return last, more


class _Generator:
    """Writes the source of a schema's writer: one function for the schema, one per named type
    referred to by name and per node too deep to inline, then compiles them together."""

    def __init__(self, names: Mapping[str, Any]) -> None:
        self.names = names
        self.namespace: dict[str, Any] = {
            "write_long": write_long, "datetime": datetime, "_EPOCH": _EPOCH, "_MISSING": _MISSING,
            "_MILLI": timedelta(milliseconds=1), "_MICRO": timedelta(microseconds=1),
            "_PACK_FLOAT": struct.Struct("<f").pack, "_PACK_DOUBLE": struct.Struct("<d").pack,
        }
        self.namespace["_LAST"], self.namespace["_MORE"] = _varint_tables()
        self.functions: dict[Any, str] = {}  # a named type's name (or a node's id) → its function
        self.pending: list[tuple[str, Any]] = []
        self.sources: list[str] = []
        #: (constant name, the field type's function, the default value), innermost first.
        self.defaults: list[tuple[str, str, Any]] = []
        self._count = 0

    def writer(self, schema: Any) -> Write:
        main = self._function_of(schema, key=("main",))
        while self.pending:
            name, node = self.pending.pop()
            self.sources.append(self._source(name, node))
        exec(compile("\n\n".join(self.sources), "<postbox.codec.compiled_writer>", "exec"), self.namespace)
        self._fill_defaults()
        write: Write = self.namespace[main]
        return write

    # -- functions and constants -----------------------------------------------------------

    def _function_of(self, node: Any, key: Any) -> str:
        """The name of the function writing ``node``, generated once per ``key``."""
        name = self.functions.get(key)
        if name is None:
            name = self.functions[key] = self._fresh("_write")
            self.pending.append((name, node))
        return name

    def _source(self, name: str, node: Any) -> str:
        body = self._node(node, "datum", 2, 0)
        return "\n".join([f"def {name}(datum, out):", "    try:", *body,
                          "    except KeyError:  # a required field is missing", "        return False",
                          "    return True"])

    def _fresh(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def _constant(self, value: Any, prefix: str = "_C") -> str:
        name = self._fresh(prefix)
        self.namespace[name] = value
        return name

    def _fill_defaults(self) -> None:
        """The bytes each field default encodes to, or None: no default this writer is sure of
        (then a missing field is the general path's). Until none changes: an outer default may
        leave out inner fields whose own defaults are found in the same pass or a later one."""
        changed = True
        while changed:
            changed = False
            for constant, function, value in self.defaults:
                if self.namespace[constant] is not None:
                    continue
                out = bytearray()
                try:
                    written = self.namespace[function](value, out)
                except Exception:  # noqa: BLE001 - e.g. a default Avro spells as JSON text: general path
                    written = False
                if written:
                    self.namespace[constant] = bytes(out)
                    changed = True

    # -- nodes -------------------------------------------------------------------------------

    def _node(self, schema: Any, var: str, indent: int, depth: int) -> list[str]:
        """Lines (at ``indent`` levels) that write the value in ``var`` or return False."""
        pad = "    " * indent
        if isinstance(schema, str) and schema not in PRIMITIVES:  # a named type, by name
            return [f"{pad}if not {self._function_of(self.names[schema], key=schema)}({var}, out):",
                    f"{pad}    return False"]
        if depth > _MAX_INLINE_DEPTH:
            return [f"{pad}if not {self._function_of(schema, key=id(schema))}({var}, out):", f"{pad}    return False"]
        if isinstance(schema, list):
            return self._union(schema, var, pad, indent, depth)
        kind, node = (schema, {"type": schema}) if isinstance(schema, str) else (schema["type"], schema)
        logical = node.get("logicalType")
        if logical is not None:
            if logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
                return self._timestamp(var, pad, "_MILLI" if logical == "timestamp-millis" else "_MICRO")
            return [f"{pad}return False  # the other logical types take the general path"]
        if kind == "record":
            return self._record(node, var, pad, indent, depth)
        if kind in ("array", "map"):
            return self._container(kind, node, var, pad, indent, depth)
        if kind in ("enum", "fixed"):
            return self._enum_or_fixed(kind, node, var, pad)
        primitive = _PRIMITIVES.get(kind) if isinstance(kind, str) else None
        if primitive is None:
            return [f"{pad}return False  # not a node this writer knows"]
        return self._primitive(primitive, var, pad)

    def _enum_or_fixed(self, kind: str, node: Mapping[str, Any], var: str, pad: str) -> list[str]:
        """An enum (its symbol's index, from a table) or a fixed (exactly its size in bytes)."""
        if kind == "enum":
            index = self._constant({symbol: i for i, symbol in enumerate(node["symbols"])}, "_SYMBOLS")
            return [f"{pad}if type({var}) is not str:", f"{pad}    return False", f"{pad}{var} = {index}.get({var})",
                    f"{pad}if {var} is None:", f"{pad}    return False", *self._count_of(var, pad)]
        return [f"{pad}if type({var}) is not bytes or len({var}) != {int(node['size'])}:", f"{pad}    return False",
                f"{pad}out += {var}"]

    def _primitive(self, lines: list[str], var: str, pad: str) -> list[str]:
        size = self._fresh("n")
        return [pad + line.replace("$v", var).replace("$n", size) for line in lines]

    def _count_of(self, var: str, pad: str) -> list[str]:
        """Append the non-negative int in ``var`` as a long."""
        return [f"{pad}if {var} < 64:", f"{pad}    out.append({var} << 1)", f"{pad}else:", f"{pad}    write_long({var}, out)"]

    def _union(self, branches: list[Any], var: str, pad: str, indent: int, depth: int) -> list[str]:
        """``[null, X]`` or ``[X, null]`` only: there fastavro's choice of branch is plain (None is
        null, anything else is X); any other union takes the general path."""
        if len(branches) != 2 or "null" not in branches or branches[0] == branches[1]:
            return [f"{pad}return False  # a union other than [null, X]"]
        null_index = branches.index("null")
        return [f"{pad}if {var} is None:", f"{pad}    out.append({null_index << 1})",
                f"{pad}elif type({var}) is tuple:  # fastavro reads a tuple in a union as (branch name, value)",
                f"{pad}    return False", f"{pad}else:", f"{pad}    out.append({(1 - null_index) << 1})",
                *self._node(branches[1 - null_index], var, indent + 1, depth + 1)]

    def _record(self, node: Mapping[str, Any], var: str, pad: str, indent: int, depth: int) -> list[str]:
        fields = node["fields"]
        lines: list[str] = []
        if any("default" in f for f in fields):
            known = self._constant(frozenset(f["name"] for f in fields), "_FIELDS")
            lines += [f"{pad}if type({var}) is not dict or not {known}.issuperset({var}):", f"{pad}    return False"]
        else:  # every field required: all present and no other key is the same as len == fields
            lines += [f"{pad}if type({var}) is not dict or len({var}) != {len(fields)}:", f"{pad}    return False"]
        for field in fields:
            value = self._fresh("v")
            if "default" not in field:  # a missing one raises KeyError: not written
                lines += [f"{pad}{value} = {var}[{field['name']!r}]", *self._node(field["type"], value, indent, depth + 1)]
                continue
            default = self._constant(None, "_DEFAULT")
            self.defaults.append((default, self._function_of(field["type"], key=("default", id(field))), field["default"]))
            lines += [f"{pad}{value} = {var}.get({field['name']!r}, _MISSING)", f"{pad}if {value} is _MISSING:",
                      f"{pad}    if {default} is None:", f"{pad}        return False", f"{pad}    out += {default}",
                      f"{pad}else:", *self._node(field["type"], value, indent + 1, depth + 1)]
        return lines

    def _container(self, kind: str, node: Mapping[str, Any], var: str, pad: str, indent: int, depth: int) -> list[str]:
        size, item = self._fresh("n"), self._fresh("v")
        if kind == "array":
            kind_var = self._fresh("t")
            lines = [f"{pad}{kind_var} = type({var})", f"{pad}if {kind_var} is not list and {kind_var} is not tuple:",
                     f"{pad}    return False", f"{pad}if {var}:", f"{pad}    {size} = len({var})",
                     *self._count_of(size, pad + "    "), f"{pad}    for {item} in {var}:"]
            lines += self._node(node["items"], item, indent + 2, depth + 1)
        else:
            key = self._fresh("k")
            lines = [f"{pad}if type({var}) is not dict:", f"{pad}    return False", f"{pad}if {var}:",
                     f"{pad}    {size} = len({var})", *self._count_of(size, pad + "    "),
                     f"{pad}    for {key}, {item} in {var}.items():"]
            lines += self._node("string", key, indent + 2, depth + 1)
            lines += self._node(node["values"], item, indent + 2, depth + 1)
        return [*lines, f"{pad}out.append(0)"]

    def _timestamp(self, var: str, pad: str, unit: str) -> list[str]:
        """timestamp-millis or -micros: an aware datetime, or an int of epoch units, turned into a
        long as fastavro's ``prepare_timestamp_*`` does (whole units since the epoch, floored)."""
        n = self._fresh("n")
        return [f"{pad}if type({var}) is datetime:", f"{pad}    if {var}.tzinfo is None:", f"{pad}        return False",
                f"{pad}    {n} = ({var} - _EPOCH) // {unit}",
                # write_long inline, 14 bits a lookup (a datetime's units are always within a long's
                # range); three lookups for milliseconds since 1970 up to the year 2248
                f"{pad}    {n} = ({n} << 1) ^ ({n} >> 63)", f"{pad}    if 0x0FFFFFFF < {n} <= 0x3FFFFFFFFFF:",
                f"{pad}        out += _MORE[{n} & 0x3FFF]", f"{pad}        out += _MORE[({n} >> 14) & 0x3FFF]",
                f"{pad}        out += _LAST[{n} >> 28]", f"{pad}    else:", f"{pad}        while {n} > 0x3FFF:",
                f"{pad}            out += _MORE[{n} & 0x3FFF]", f"{pad}            {n} >>= 14", f"{pad}        out += _LAST[{n}]",
                f"{pad}else:", *self._primitive(_PRIMITIVES["long"], var, pad + "    ")]


_MISSING = object()

#: The primitives' lines, for the value in ``$v`` (``$n``: a name of their own for a length).
_PRIMITIVES: dict[str, list[str]] = {
    "null": ["if $v is not None:", "    return False"],
    "boolean": ["if $v is True:", "    out.append(1)", "elif $v is False:", "    out.append(0)", "else:", "    return False"],
    # 0..63 is one byte; else the zigzag value, by one lookup below 2**14 (|value| < 8192)
    "int": ["if type($v) is not int:", "    return False", "if 0 <= $v < 64:", "    out.append($v << 1)",
            f"elif {INT_RANGE[0]} <= $v <= {INT_RANGE[1]}:", "    $n = ($v << 1) ^ ($v >> 63)", "    if $n < 0x4000:",
            "        out += _LAST[$n]", "    else:", "        write_long($v, out)", "else:", "    return False"],
    "long": ["if type($v) is not int:", "    return False", "if 0 <= $v < 64:", "    out.append($v << 1)",
             f"elif {LONG_RANGE[0]} <= $v <= {LONG_RANGE[1]}:", "    $n = ($v << 1) ^ ($v >> 63)", "    if $n < 0x4000:",
             "        out += _LAST[$n]", "    else:", "        write_long($v, out)", "else:", "    return False"],
    # an OverflowError (beyond the format's range) goes to the caller: its general path decides
    "float": ["if type($v) is not float and type($v) is not int:", "    return False", "out += _PACK_FLOAT($v)"],
    "double": ["if type($v) is not float and type($v) is not int:", "    return False", "out += _PACK_DOUBLE($v)"],
    "bytes": ["if type($v) is not bytes:", "    return False", "write_long(len($v), out)", "out += $v"],
    # a lone surrogate raises in encode: the caller's general path
    "string": ["if type($v) is not str:", "    return False", "$v = $v.encode()", "$n = len($v)", "if $n < 64:",
               "    out.append($n << 1)", "else:", "    write_long($n, out)", "out += $v"],
}

__all__ = ["Write", "compile_writer", "write_long"]
