"""#17.2: the faster UUIDv7 generator keeps what the slower one promised (property tests).

What callers rely on (module docstring of postbox.outbox.uuid7): every id is a well-formed UUIDv7
(version 7, RFC 4122 variant, the creation millisecond in its first 48 bits); the ids one process
makes from the clock strictly increase, also when the clock repeats a millisecond, steps back or
more than 4,096 ids fall in one millisecond; threads never get the same id; a forked child never
repeats its parent's ids. And the ids are real ``uuid.UUID`` objects, indistinguishable from
``uuid.UUID(int=...)`` of the same value.
"""

from __future__ import annotations

import copy
import os
import pickle
import sys
import threading
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from postbox.outbox.uuid7 import _uuid, uuid7, uuid7_block, uuid7_ints, uuid7_many, uuid7_unix_ms, uuids_from_block

uuid7_module = sys.modules["postbox.outbox.uuid7"]  # the package re-exports the function under this name

U128 = st.integers(min_value=0, max_value=(1 << 128) - 1)


@given(U128)
def test_a_made_uuid_is_indistinguishable_from_uuid_of_the_same_int(value: int) -> None:
    made, reference = _uuid(value), uuid.UUID(int=value)
    assert type(made) is uuid.UUID
    assert made == reference and hash(made) == hash(reference)
    assert (str(made), repr(made), made.bytes, made.hex, made.fields) == (
        str(reference), repr(reference), reference.bytes, reference.hex, reference.fields)
    assert (made.version, made.variant, made.is_safe) == (reference.version, reference.variant, reference.is_safe)
    assert pickle.loads(pickle.dumps(made)) == reference and copy.deepcopy(made) == reference
    assert not (made < reference) and not (made > reference)
    with pytest.raises(TypeError):
        made.int = 0  # type: ignore[misc]  # still immutable


def well_formed(ids: list[uuid.UUID]) -> bool:
    return all(u.version == 7 and u.variant == uuid.RFC_4122 for u in ids)


@settings(max_examples=200)
@given(st.lists(st.one_of(st.just(None), st.integers(1, 300)), min_size=1, max_size=40))
def test_ids_from_the_clock_strictly_increase_through_any_mix_of_calls(calls: list[int | None]) -> None:
    """uuid7() and uuid7_many(n) in any order make one strictly increasing sequence."""
    ids: list[uuid.UUID] = []
    for call in calls:
        ids.extend([uuid7()] if call is None else uuid7_many(call))
    assert all(a < b for a, b in zip(ids, ids[1:]))
    assert well_formed(ids)


class SteppingClock:
    """A stand-in for the ``time`` module whose ``time_ns`` returns the readings it was given."""

    def __init__(self, readings_ms: list[int]) -> None:
        self._readings: Iterator[int] = iter(readings_ms)

    def time_ns(self) -> int:
        return next(self._readings) * 1_000_000


@settings(max_examples=100, deadline=None)
@given(st.integers(1_600_000_000_000, 1_900_000_000_000),
       st.lists(st.tuples(st.integers(-50, 50), st.integers(1, 5000)), min_size=1, max_size=6))
def test_ids_strictly_increase_when_the_clock_repeats_steps_back_or_overflows_a_millisecond(
    start_ms: int, steps: list[tuple[int, int]]
) -> None:
    """Each step moves the clock by -50..50 ms and reads it 1..5,000 times (over the 12-bit
    counter's 4,096 in one millisecond): the ids still strictly increase, and none runs ahead of
    the latest reading by more than the ids made in its millisecond need."""
    readings = []
    now = start_ms
    for delta, reads in steps:
        now = max(0, now + delta)
        readings.extend([now] * reads)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(uuid7_module, "time", SteppingClock(readings))
        patch.setattr(uuid7_module, "_last_ms", 0)
        ids = [uuid7() for _ in readings]
    assert all(a < b for a, b in zip(ids, ids[1:]))
    assert well_formed(ids)
    highest = 0
    for reading, made in zip(readings, ids):
        highest = max(highest, reading)
        assert uuid7_unix_ms(made) <= highest + len(readings) // 4096 + 1


def block(n: int) -> list[uuid.UUID]:
    return uuids_from_block(uuid7_block(n), 0, n)


@settings(max_examples=200)
@given(st.lists(st.tuples(st.sampled_from(["one", "many", "ints", "block"]), st.integers(1, 5000)), min_size=1, max_size=12))
def test_every_way_of_making_ids_continues_one_sequence(calls: list[tuple[str, int]]) -> None:
    """A batch's ids (uuid7_block: bytes made without a Python operation per id) are the same
    kind of sequence as uuid7()'s: strictly increasing across any mix of calls, also past 4,096
    in one millisecond, each a well-formed UUIDv7 whose bytes are its value's."""
    ids: list[uuid.UUID] = []
    for way, n in calls:
        if way == "one":
            ids.append(uuid7())
        elif way == "many":
            ids.extend(uuid7_many(n))
        elif way == "ints":
            ids.extend(_uuid(v) for v in uuid7_ints(n))
        else:
            raw = uuid7_block(n)
            made = uuids_from_block(raw, 0, n)
            assert len(raw) == 16 * n and b"".join(u.bytes for u in made) == raw
            assert uuids_from_block(raw, n // 2, n) == made[n // 2:]
            ids.extend(made)
    assert all(a < b for a, b in zip(ids, ids[1:]))
    assert well_formed(ids)


@settings(max_examples=100, deadline=None)
@given(st.integers(1_600_000_000_000, 1_900_000_000_000),
       st.lists(st.tuples(st.integers(-50, 50), st.integers(1, 9000)), min_size=1, max_size=6))
def test_blocks_strictly_increase_when_the_clock_repeats_or_steps_back(start_ms: int, steps: list[tuple[int, int]]) -> None:
    """One clock reading per block; a block of more ids than a millisecond's counter holds runs
    ahead of the clock by the milliseconds its ids need, as that many uuid7() calls would."""
    readings = []
    now = start_ms
    for delta, _ in steps:
        now = max(0, now + delta)
        readings.append(now)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(uuid7_module, "time", SteppingClock(readings))
        patch.setattr(uuid7_module, "_last_ms", 0)
        blocks = [block(n) for _, n in steps]
    ids = [u for made in blocks for u in made]
    assert all(a < b for a, b in zip(ids, ids[1:])) and well_formed(ids)
    highest, so_far = 0, 0
    for reading, made in zip(readings, blocks):
        highest, so_far = max(highest, reading), so_far + len(made)
        assert uuid7_unix_ms(made[0]) >= reading or uuid7_unix_ms(made[0]) >= highest  # never behind the clock it read
        assert uuid7_unix_ms(made[-1]) <= highest + so_far // 4096 + 1


def test_threads_never_share_an_id_and_each_sees_its_ids_increase() -> None:
    made: list[list[uuid.UUID]] = [[] for _ in range(4)]

    def work(out: list[uuid.UUID]) -> None:
        for _ in range(5000):
            out.append(uuid7())

    threads = [threading.Thread(target=work, args=(out,)) for out in made]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [u for out in made for u in out]
    assert len(set(every)) == len(every) == 20000
    assert all(all(a < b for a, b in zip(out, out[1:])) for out in made)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX-only")
def test_a_forked_child_never_repeats_its_parents_ids() -> None:
    """The random bytes come from a pool; a child that kept its parent's pool would draw the same
    bytes as the parent after the fork, in the same millisecond the same ids."""
    uuid7()  # the pool is filled before the fork
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its ids to the parent, then leave without running pytest's teardown
        try:
            os.write(write, b"".join(u.bytes for u in uuid7_many(50)) + uuid7_block(50))
        finally:
            os._exit(0)
    os.close(write)
    parent = {u.bytes[8:] for u in [*uuid7_many(50), *block(50)]}  # the random tail (rand_b and the variant)
    child_bytes = b""
    while chunk := os.read(read, 4096):
        child_bytes += chunk
    os.close(read)
    os.waitpid(pid, 0)
    child = {child_bytes[i + 8:i + 16] for i in range(0, len(child_bytes), 16)}
    assert len(child) == 100 and not parent & child
