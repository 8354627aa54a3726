"""UUIDv7 event ids (RFC 9562): 48-bit Unix milliseconds, then randomness.

Why v7: ids sort by creation time, so the outbox primary key grows at its right edge (cheap
B-tree inserts) and the outbox can be range-partitioned on ``id`` itself — no second index on
``created_at`` is needed to find old rows. Within one millisecond this process keeps ids strictly
increasing (RFC 9562 §6.2 method 1: the 12-bit ``rand_a`` field is a counter seeded at random), so
ids made by one writer sort in emit order.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from datetime import datetime, timezone

_lock = threading.Lock()
_last_ms = 0
_counter = 0

_VERSION = 0x7
_VARIANT = 0b10
_COUNTER_MAX = 0xFFF


def uuid7(unix_ms: int | None = None) -> uuid.UUID:
    """A new UUIDv7; strictly greater than the previous one this process made from the clock.

    ``unix_ms`` makes an id for that instant instead (random counter, outside the sequence).
    """
    rand = int.from_bytes(os.urandom(10), "big")
    if unix_ms is not None:
        return _build(unix_ms, (rand >> 64) & _COUNTER_MAX, rand)
    with _lock:
        ms, counter = _next_in_sequence(rand)
    return _build(ms, counter, rand)


def uuid7_many(n: int) -> list[uuid.UUID]:
    """``n`` new UUIDv7s in sequence, as ``n`` calls of :func:`uuid7` would make them.

    For batches: one read of the random source and one lock for all of them (#17).
    """
    pool = os.urandom(10 * n)
    with _lock:
        parts = [(rand, *_next_in_sequence(rand)) for rand in
                 (int.from_bytes(pool[i:i + 10], "big") for i in range(0, 10 * n, 10))]
    return [_build(ms, counter, rand) for rand, ms, counter in parts]


def _next_in_sequence(rand: int) -> tuple[int, int]:
    """The (millisecond, counter) of the next id of this process; call with ``_lock`` held."""
    global _last_ms, _counter
    ms = time.time_ns() // 1_000_000
    if ms > _last_ms:
        _last_ms = ms
        _counter = (rand >> 64) & 0x7FF  # seed below half the range: room to count up
    else:
        # Same millisecond (or the clock stepped back): count on from the last id.
        ms = _last_ms
        _counter += 1
        if _counter > _COUNTER_MAX:
            _last_ms = ms = ms + 1
            _counter = 0
    return ms, _counter


def _build(ms: int, counter: int, rand: int) -> uuid.UUID:
    rand_b = rand & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80 | _VERSION << 76 | counter << 64 | _VARIANT << 62 | rand_b
    return uuid.UUID(int=value)


def uuid7_unix_ms(value: uuid.UUID) -> int:
    """The Unix time in milliseconds stored in a UUIDv7."""
    if value.version != 7:
        raise ValueError(f"{value} is not a UUIDv7 (version {value.version})")
    return value.int >> 80


def uuid7_datetime(value: uuid.UUID) -> datetime:
    """The creation time of a UUIDv7, as an aware UTC datetime."""
    return datetime.fromtimestamp(uuid7_unix_ms(value) / 1000, tz=timezone.utc)


def uuid7_lower_bound(moment: datetime) -> uuid.UUID:
    """The smallest UUID whose v7 timestamp is ``moment`` (a partition bound).

    Every UUIDv7 made at or after ``moment`` compares greater or equal, every one made before
    compares smaller: PostgreSQL compares uuids bytewise, and the timestamp is the leading bytes.
    """
    if moment.tzinfo is None:
        raise ValueError("moment must be timezone-aware")
    ms = int(moment.timestamp() * 1000)
    return uuid.UUID(int=(ms & ((1 << 48) - 1)) << 80)
