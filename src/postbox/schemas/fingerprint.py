"""CRC-64-AVRO schema fingerprints, as the Avro specification defines them.

The fingerprint is the 64-bit Rabin fingerprint of a schema's Parsing Canonical Form (PCF: the
schema with doc, defaults, aliases and whitespace removed and names fully qualified). Two schemas
with the same PCF read and write identical bytes, so the fingerprint identifies a *writer schema*
for decoding. Single-object encoding carries it as 8 little-endian bytes; that byte form is what
postbox indexes and prints (as hex), the same as the Java and fastavro implementations.
"""

from __future__ import annotations

from typing import Any

from fastavro.schema import to_parsing_canonical_form

#: The CRC-64-AVRO "empty" value from the specification.
EMPTY = 0xC15D213AA4D7A795


def _table() -> tuple[int, ...]:
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (EMPTY & -(fp & 1))
        table.append(fp)
    return tuple(table)


_TABLE = _table()


def rabin64(data: bytes) -> int:
    """The CRC-64-AVRO fingerprint of ``data`` as an unsigned integer."""
    fp = EMPTY
    for byte in data:
        fp = (fp >> 8) ^ _TABLE[(fp ^ byte) & 0xFF]
    return fp


def canonical_form(parsed_schema: Any) -> str:
    """The Parsing Canonical Form of a schema parsed by ``fastavro.parse_schema``."""
    return to_parsing_canonical_form(parsed_schema)


def fingerprint_of_canonical(canonical: str) -> bytes:
    """The 8 fingerprint bytes (little-endian) of a canonical form, as single-object encoding writes them."""
    return rabin64(canonical.encode("utf-8")).to_bytes(8, "little")


def fingerprint(parsed_schema: Any) -> bytes:
    """The 8 fingerprint bytes of a parsed schema."""
    return fingerprint_of_canonical(canonical_form(parsed_schema))
