"""CRC-64-AVRO schema fingerprints, as the Avro specification defines them, computed by fastavro.

The fingerprint is the 64-bit Rabin fingerprint of a schema's Parsing Canonical Form (PCF: the
schema with doc, defaults, aliases and whitespace removed and names fully qualified). Two schemas
with the same PCF read and write identical bytes, so the fingerprint identifies a *writer schema*
for decoding. Single-object encoding carries it as 8 little-endian bytes; that byte form is what
postbox indexes and prints (as hex), the same as the Java and fastavro implementations.
"""

from __future__ import annotations

from typing import Any

from fastavro.schema import fingerprint as _fastavro_fingerprint
from fastavro.schema import to_parsing_canonical_form

ALGORITHM = "CRC-64-AVRO"


def canonical_form(parsed_schema: Any) -> str:
    """The Parsing Canonical Form of a schema parsed by ``fastavro.parse_schema``."""
    return to_parsing_canonical_form(parsed_schema)


def fingerprint_of_canonical(canonical: str) -> bytes:
    """The 8 fingerprint bytes (little-endian) of a canonical form, as single-object encoding
    writes them: fastavro's hex is already that byte order."""
    return bytes.fromhex(_fastavro_fingerprint(canonical, ALGORITHM))


def fingerprint(parsed_schema: Any) -> bytes:
    """The 8 fingerprint bytes of a parsed schema."""
    return fingerprint_of_canonical(canonical_form(parsed_schema))
