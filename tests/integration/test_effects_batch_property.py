"""Property: a whole batch applied in one engine call equals its events run one by one through
redis-py, each exactly once and all or nothing (review of #14.2's packing).

test_effects_property.py checks one event per call with values from a short list. The runtime
sends batches: many events in one EVALSHA (each distinct command shape once, per-event arguments
sliced by the script), several calls per round when ``batch_size`` splits them, the round packed
by :func:`postbox.effects.wire.pack`, and values made by the flat builder from bytes of any
content, ints, floats and Decimals of any size, empty and beyond the packer's 1 KiB table. The
oracle is a straightforward model on a second key family: for each event in order, a duplicate id
changes nothing; otherwise its commands run one by one through redis-py, and when one fails the
event's keys are put back as they were (DUMP/RESTORE). Then the engine's verdicts must be the
model's and both families equal; the same batch applied again is all duplicates and changes
nothing.
"""

from __future__ import annotations

import itertools
import uuid

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from postbox.effects import Effects, EffectsEngine, EventRef, Outcome
from tests.support.redis_servers import RedisServer
from tests.support.redis_state import key_value

pytestmark = pytest.mark.integration

KEYS = 3
AGGREGATES = 3


@pytest.fixture(scope="module")
def own_redis():
    server = RedisServer(config={"appendonly": "no"}).start()
    yield server
    server.stop()


BYTES = st.one_of(st.binary(max_size=12), st.binary(min_size=1020, max_size=1100), st.just(b""))
NUMBERS = st.one_of(
    st.integers(-(2**80), 2**80),
    st.floats(allow_nan=False, allow_infinity=False),
    st.decimals(allow_nan=False, allow_infinity=False, places=3, min_value=-(10**12), max_value=10**12),
)
TEXT = st.text(max_size=8)
VALUES = st.one_of(BYTES, NUMBERS, TEXT)
FIELDS = st.one_of(st.binary(max_size=6), st.sampled_from(["f", "g", "]]'\"", "é"]))
KEY = st.integers(0, KEYS - 1)

COMMANDS = st.one_of(
    st.tuples(st.just("hset"), KEY, st.dictionaries(FIELDS, VALUES, min_size=1, max_size=3)),
    st.tuples(st.just("hincrby"), KEY, FIELDS, st.integers(-(2**40), 2**40)),
    st.tuples(st.just("set"), KEY, VALUES),
    st.tuples(st.just("incrby"), KEY, st.integers(-(2**40), 2**40)),
    st.tuples(st.just("sadd"), KEY, st.lists(VALUES, min_size=1, max_size=3)),
    st.tuples(st.just("rpush"), KEY, st.lists(VALUES, min_size=1, max_size=3)),
    st.tuples(st.just("zincrby"), KEY, st.integers(-100, 100), FIELDS),
    st.tuples(st.just("delete"), KEY),
)
EVENTS = st.lists(
    st.tuples(st.integers(0, 5), st.lists(COMMANDS, min_size=1, max_size=4)),
    min_size=1, max_size=14,
)  # (event number: a repeat is a redelivery, maybe with other effects (a handler changed), commands)

_counter = itertools.count()


def _encode(value: object) -> bytes:
    """A value as the builder documents it: str as UTF-8, bytes verbatim, numbers as decimal text
    (a float by repr, a Decimal by str)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, float):
        return repr(value).encode()
    return str(value).encode()


def build(fx: Effects, command: tuple, key) -> None:
    op, k, *p = command
    if op == "hset":
        fx.hset(key(k), p[0])
    elif op == "hincrby":
        fx.hincrby(key(k), p[0], p[1])
    elif op == "set":
        fx.set(key(k), p[0])
    elif op == "incrby":
        fx.incrby(key(k), p[0])
    elif op in ("sadd", "rpush"):
        getattr(fx, op)(key(k), *p[0])
    elif op == "zincrby":
        fx.zincrby(key(k), p[0], p[1])
    elif op == "delete":
        fx.delete(key(k))


def run_plain(client: redis.Redis, command: tuple, key) -> None:
    op, k, *p = command
    if op == "hset":
        client.execute_command("HSET", key(k), *[_encode(x) for kv in p[0].items() for x in kv])
    elif op == "hincrby":
        client.execute_command("HINCRBY", key(k), _encode(p[0]), p[1])
    elif op == "set":
        client.execute_command("SET", key(k), _encode(p[0]))
    elif op == "incrby":
        client.execute_command("INCRBY", key(k), p[0])
    elif op in ("sadd", "rpush"):
        client.execute_command(op.upper(), key(k), *[_encode(v) for v in p[0]])
    elif op == "zincrby":
        client.execute_command("ZINCRBY", key(k), p[0], _encode(p[1]))
    elif op == "delete":
        client.execute_command("DEL", key(k))


def state(client: redis.Redis, key: str) -> tuple:
    kind = client.type(key).decode()
    if kind == "none":
        return ("none",)
    value = key_value(client, key, kind)
    return (kind, value)


def model_event(client: redis.Redis, commands: list, key) -> Outcome:
    """One event on the plain family: every command, or (the first error) none of them."""
    names = [key(i) for i in range(KEYS)]
    saved = {n: client.dump(n) for n in names}
    try:
        for command in commands:
            run_plain(client, command, key)
    except redis.ResponseError:
        for n, dumped in saved.items():
            client.delete(n)
            if dumped is not None:
                client.restore(n, 0, dumped)
        return Outcome.FAILED
    return Outcome.APPLIED


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(events=EVENTS, batch_size=st.sampled_from([1, 3, 500]))
def test_a_batch_in_one_apply_equals_its_events_one_by_one(own_redis, events, batch_size) -> None:
    client = own_redis.client()
    try:
        run = f"b{next(_counter)}-{uuid.uuid4().hex[:6]}"

        def family(name: str, aggregate: int):
            # aggregates 0 and 1 keyed under their own tag (aggregate_keys), 2 under another one
            # (the engine also reads that event's legacy-layout marker)
            tag = f"{run}:{aggregate}" if aggregate < 2 else f"{run}:elsewhere"
            return lambda i: f"{{{tag}}}:{name}:{i}"

        ids = {n: str(uuid.uuid4()) for n in range(6)}
        seen: set[int] = set()
        failed: set[int] = set()
        expected: list[Outcome] = []
        for number, commands in events:
            aggregate = number % AGGREGATES  # an event's aggregate is its own: the same on redelivery
            if number in seen:
                expected.append(Outcome.DUPLICATE)
                continue
            if number in failed:  # its verdict is in its marker: failed earlier, nothing runs
                expected.append(Outcome.FAILED)
                continue
            outcome = model_event(client, commands, family("plain", aggregate))
            (seen if outcome is Outcome.APPLIED else failed).add(number)
            expected.append(outcome)

        pairs = []
        for number, commands in events:
            aggregate = number % AGGREGATES
            fx = Effects()
            for command in commands:
                build(fx, command, family("engine", aggregate))
            pairs.append((EventRef(ids[number], f"{run}:{aggregate}"), fx))
        engine = EffectsEngine(client, f"batch-{run}", batch_size=batch_size, functions_dir=None)
        got = [r.outcome for r in engine.apply(pairs)]
        assert got == expected, events

        def everything() -> list[tuple]:
            return [state(client, family(name, a)(i)) for name in ("engine", "plain") for a in range(AGGREGATES) for i in range(KEYS)]

        half = len(everything()) // 2
        now = everything()
        assert now[:half] == now[half:], events
        again = [r.outcome for r in engine.apply(pairs)]
        assert all(o is Outcome.DUPLICATE for o, e in zip(again, expected) if e is not Outcome.FAILED)
        assert everything()[:half] == now[:half] or Outcome.FAILED in expected
    finally:
        client.close()
