"""UUIDv7 event ids (RFC 9562): 48-bit Unix milliseconds, then randomness.

Why v7: ids sort by creation time, so the outbox primary key grows at its right edge (cheap
B-tree inserts) and the outbox can be range-partitioned on ``id`` itself — no second index on
``created_at`` is needed to find old rows. Within one millisecond this process keeps ids strictly
increasing (RFC 9562 §6.2 method 1: the 12-bit ``rand_a`` field is a counter seeded at random), so
ids made by one writer sort in emit order.
"""

from __future__ import annotations

import collections
import itertools
import os
import struct
import threading
import time
import uuid
from datetime import datetime, timezone

_VERSION = 0x7
_VARIANT = 0b10
_COUNTER_MAX = 0xFFF
_MS_MASK = (1 << 48) - 1
_RAND_B_MASK = (1 << 62) - 1
_HEAD = _VERSION << 76 | _VARIANT << 62  # the version and variant bits, in place

#: Random bytes are read from the OS this many at a time (10 per id), not 10 per call:
#: os.urandom is a system call, about a fifth of what one id cost when read per call.
_POOL_BYTES = 10 * 256

_lock = threading.Lock()
_last_ms = 0
_counter = 0
_pool = b""
_pos = 0


def _after_fork_in_child() -> None:
    """A forked child starts a fresh pool (else parent and child would draw the same bytes and
    could make the same ids) and a fresh lock (another thread may have held it at the fork).

    What this cannot cover: a child made by a raw C ``fork()`` that skips Python's at-fork hooks
    (``PyOS_AfterFork_Child``, which the C API requires of every child that goes on running
    Python; ``os.fork``, ``multiprocessing`` and servers forking through ``os.fork`` run it). Such
    a child inherits the pool: for up to 255 ids after the fork it draws the bytes the parent
    draws, and an id it makes in the same millisecond as the parent's from the same position is
    the same id. Not guarded, because the only check that catches it is ``os.getpid()`` per id
    (measured ~350 ns against an id's ~2.1 µs here, +17 %); comparing the pid per refill would not
    help (the shared bytes are the ones before the refill, and each process's refill is fresh).
    CPython's ``random`` module repeats its parent's sequence in such a child too."""
    global _lock, _pool, _pos
    _lock = threading.Lock()
    _pool, _pos = b"", 0


os.register_at_fork(after_in_child=_after_fork_in_child)


_new = object.__new__
_set = object.__setattr__
_UUID = uuid.UUID
_UNKNOWN = uuid.SafeUUID.unknown
#: The slots UUID.__init__ sets, set through their descriptors (UUID's own __setattr__ refuses).
_SET_INT = _UUID.__dict__["int"].__set__
_SET_SAFE = _UUID.__dict__["is_safe"].__set__
_HALVES = struct.Struct(">QQ")


def _random80() -> int:
    """80 random bits (12 seed the counter, 62 fill ``rand_b``) from the OS's CSPRNG, as RFC 9562
    §6.9 asks; call with ``_lock`` held."""
    global _pool, _pos
    pos = _pos
    if pos >= len(_pool):
        _pool, pos = os.urandom(_POOL_BYTES), 0
    _pos = pos + 10
    return int.from_bytes(_pool[pos:pos + 10], "big")


def uuid7(unix_ms: int | None = None) -> uuid.UUID:
    """A new UUIDv7; strictly greater than the previous one this process made from the clock.

    ``unix_ms`` makes an id for that instant instead (random counter, outside the sequence).
    """
    global _last_ms, _counter
    with _lock:
        rand = _random80()
        if unix_ms is not None:
            return _uuid((unix_ms & _MS_MASK) << 80 | _HEAD | ((rand >> 64) & _COUNTER_MAX) << 64 | (rand & _RAND_B_MASK))
        ms = time.time_ns() // 1_000_000
        if ms > _last_ms:
            _last_ms = ms
            counter = _counter = (rand >> 64) & 0x7FF  # seed below half the range: room to count up
        else:
            # Same millisecond (or the clock stepped back): count on from the last id.
            ms = _last_ms
            counter = _counter = _counter + 1
            if counter > _COUNTER_MAX:
                _last_ms = ms = ms + 1
                counter = _counter = 0
    return _uuid((ms & _MS_MASK) << 80 | _HEAD | counter << 64 | (rand & _RAND_B_MASK))


def uuid7_many(n: int) -> list[uuid.UUID]:
    """``n`` new UUIDv7s in sequence, as ``n`` calls of :func:`uuid7` would make them."""
    return uuids_of(uuid7_ints(n))


def uuids_from_block(block: bytes, start: int, stop: int) -> list[uuid.UUID]:
    """The UUIDs ``start`` to ``stop`` of a :func:`uuid7_block`, made as :func:`_uuid` makes
    one, a slot at a time for all of them (``map`` over the slot's descriptor: no Python call per id)."""
    values = [top << 64 | bottom for top, bottom in _HALVES.iter_unpack(block[16 * start:16 * stop])]
    made = list(map(_new, itertools.repeat(_UUID, len(values))))
    collections.deque(map(_SET_INT, made, values), 0)
    collections.deque(map(_SET_SAFE, made, itertools.repeat(_UNKNOWN, len(values))), 0)
    return made


def uuids_of(values: list[int]) -> list[uuid.UUID]:
    """``[uuid.UUID(int=v) for v in values]`` for UUIDv7 values (:func:`uuid7_ints`), made as
    :func:`_uuid` makes one, without a call per id."""
    made = []
    for value in values:
        u = _new(_UUID)
        _set(u, "int", value)
        _set(u, "is_safe", _UNKNOWN)
        made.append(u)
    return made


def uuid7_ints(n: int) -> list[int]:
    """The 128-bit values of ``n`` new UUIDv7s in sequence, made in one go (:func:`_reserve`)."""
    if n <= 0:
        return []
    rand = os.urandom(8 * n + 2)  # a 62-bit tail per id, and the counter's seed
    seq = _reserve(n, rand[-2] << 8 | rand[-1])
    # seq is ms << 12 | counter; an id's top 64 bits are the ms (48), the version (4), the counter (12).
    return [((s >> 12) << 16 | _VERSION_BITS | (s & _COUNTER_MAX)) << 64 | _VARIANT_BITS | (tail & _RAND_B_MASK)
            for s, tail in zip(range(seq, seq + n), struct.unpack_from(f">{n}Q", rand))]


def uuid7_block(n: int) -> bytes:
    """The 16 bytes each of ``n`` new UUIDv7s in sequence, one after the other, as
    :func:`uuid7_ints` makes them, without a Python operation per id: the top halves are runs of
    consecutive numbers (one run per millisecond), the bottom halves random bytes with the variant
    bits set by one ``translate``. What a batch writes into its COPY stream."""
    if n <= 0:
        return b""
    rand = bytearray(os.urandom(8 * n + 2))
    seq = _reserve(n, rand[-2] << 8 | rand[-1])
    last = seq + n - 1
    tops = itertools.chain.from_iterable(
        range(ms << 16 | _VERSION_BITS | (seq & _COUNTER_MAX if ms == seq >> 12 else 0),
              (ms << 16 | _VERSION_BITS | (last & _COUNTER_MAX if ms == last >> 12 else _COUNTER_MAX)) + 1)
        for ms in range(seq >> 12, (last >> 12) + 1))
    tails = rand[:8 * n]
    tails[0::8] = tails[0::8].translate(_VARIANT_TABLE)
    block = bytearray(16 * n)
    with memoryview(block).cast("Q") as halves, memoryview(struct.pack(f">{n}Q", *tops)) as top, memoryview(tails) as bottom:
        halves[0::2] = top.cast("Q")
        halves[1::2] = bottom.cast("Q")
    return bytes(block)


def _reserve(n: int, seed: int) -> int:
    """Take ``n`` places of this process's sequence; returns the first, as ``ms << 12 | counter``.

    The same sequence as ``n`` calls of :func:`uuid7` in the same millisecond: the clock is read
    once, and the millisecond and the 12-bit counter are counted on as one number, so a counter
    past 4,095 carries into the millisecond exactly as :func:`uuid7` steps it; a new millisecond
    seeds the counter below half its range with ``seed``. The callers' random tails come straight
    from ``os.urandom`` (one call, not the pool), so a forked child shares none."""
    global _last_ms, _counter
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms > _last_ms:
            seq = ms << 12 | (seed & 0x7FF)
        else:
            seq = (_last_ms << 12 | _counter) + 1
        last = seq + n - 1
        _last_ms, _counter = last >> 12, last & _COUNTER_MAX
    return seq


_VERSION_BITS = _VERSION << 12
_VARIANT_BITS = _VARIANT << 62
#: A byte with its top two bits made the RFC 9562 variant (0b10).
_VARIANT_TABLE = bytes((b & 0x3F) | (_VARIANT << 6) for b in range(256))


def _uuid(value: int) -> uuid.UUID:
    """``uuid.UUID(int=value)`` for a value known to be a 128-bit UUIDv7, without the checks of
    ``UUID.__init__`` (its argument parsing was a third of an id's cost). It sets the same two
    slots ``__init__`` sets, the same way; tests/unit/test_uuid7.py checks the result is
    indistinguishable from ``uuid.UUID(int=value)`` (equality, hash, text, fields, pickling)."""
    u = _new(_UUID)
    _set(u, "int", value)
    _set(u, "is_safe", _UNKNOWN)
    return u


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
