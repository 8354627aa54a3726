"""The INSERT form's six arrays, passed to psycopg as the binary values they already are.

Why: where ``emit_many`` cannot COPY (a pipelined connection), it sends one INSERT of six unnested
arrays. Given as Python lists, psycopg dumps every element again (a Python call per element and
column); but an encoded batch already holds every element in the form a binary array carries it
(its length, then its bytes: the same as a binary COPY field), so the arrays are cut from it
(:meth:`~postbox.outbox.batch.EncodedBatch.arrays`) and handed over as they are: each wrapper type
below has a dumper that returns its bytes with the array's type oid.

The dumpers are registered on the writer's own cursor only (:mod:`postbox.outbox.emit_cursor`),
never on the caller's connection or on psycopg's global adapters.
"""

from __future__ import annotations

from typing import Any

from psycopg import adapt, pq

#: PostgreSQL's type oids of uuid[], text[] and bytea[] (pg_type; fixed since PostgreSQL 8.3).
UUID_ARRAY_OID, TEXT_ARRAY_OID, BYTEA_ARRAY_OID = 2951, 1009, 1001


class UuidArray(bytes):
    """A uuid[] in PostgreSQL's binary array format."""


class TextArray(bytes):
    """A text[] in PostgreSQL's binary array format (the elements UTF-8)."""


class ByteaArray(bytes):
    """A bytea[] in PostgreSQL's binary array format."""


class _Prebuilt(adapt.Dumper):
    format = pq.Format.BINARY

    def dump(self, obj: Any) -> bytes:
        return obj  # type: ignore[no-any-return]  # one of the wrappers: bytes already


class _UuidArrayDumper(_Prebuilt):
    oid = UUID_ARRAY_OID


class _TextArrayDumper(_Prebuilt):
    oid = TEXT_ARRAY_OID


class _ByteaArrayDumper(_Prebuilt):
    oid = BYTEA_ARRAY_OID


def register_on(cursor: Any) -> None:
    """Make ``cursor`` (a psycopg cursor, sync or async) send the wrapper types as they are."""
    cursor.adapters.register_dumper(UuidArray, _UuidArrayDumper)
    cursor.adapters.register_dumper(TextArray, _TextArrayDumper)
    cursor.adapters.register_dumper(ByteaArray, _ByteaArrayDumper)


__all__ = ["BYTEA_ARRAY_OID", "TEXT_ARRAY_OID", "UUID_ARRAY_OID", "ByteaArray", "TextArray", "UuidArray", "register_on"]
