"""#14.2: the engine's own packed round trip (postbox.effects.wire) keeps what redis-py's command
path gave it: replies in order, error replies as redis-py's exception types without losing step,
the client's retry after a dropped connection, the connection handed back to its pool, and a
single-connection client's one connection."""

from __future__ import annotations

import uuid

import redis
from redis.exceptions import NoScriptError, ResponseError

from postbox.effects.wire import round_trip
from tests.integration.conftest_effects import own_client, own_redis  # noqa: F401 - fixtures
from tests.support.redis_servers import RedisServer


def test_replies_come_back_in_order_and_an_error_reply_as_its_exception(own_client: redis.Redis) -> None:
    key = f"wire:{uuid.uuid4().hex}"
    replies = round_trip(own_client, [
        (b"SET", key, "a"),
        (b"EVALSHA", "0" * 40, 0),  # an unknown script: NOSCRIPT
        (b"HSET", key, b"f", 1),  # WRONGTYPE: the key holds a string
        (b"GET", key),
    ])  # fmt: skip
    assert replies[0] is True or replies[0] == b"OK"
    assert isinstance(replies[1], NoScriptError)  # the type the engine reloads the script for
    assert isinstance(replies[2], ResponseError) and str(replies[2]).startswith("WRONGTYPE")
    assert replies[3] == b"a"
    # every reply was read: the pooled connection is in step for the next command
    assert own_client.get(key) == b"a"
    assert round_trip(own_client, [(b"INCRBY", key + ":n", 5)]) == [5]


def test_the_connection_goes_back_to_its_pool(own_client: redis.Redis) -> None:
    pool = own_client.connection_pool
    round_trip(own_client, [(b"PING",)])
    in_use = len(pool._in_use_connections)  # redis-py's pool has no public count
    for _ in range(5):
        round_trip(own_client, [(b"PING",), (b"EVALSHA", "0" * 40, 0)])
    assert len(pool._in_use_connections) == in_use == 0


def test_a_connection_dropped_mid_round_is_reconnected_and_the_round_resent(own_client: redis.Redis) -> None:
    key = f"wire:{uuid.uuid4().hex}"
    [own_id] = round_trip(own_client, [(b"CLIENT", b"ID")])  # the pooled connection the next round takes
    # The server closes the connection after its first reply: the round's second reply is lost,
    # so the client's retry policy reconnects and resends the whole round (the kill then names
    # a client gone: it kills none; the INCR answers on the new connection).
    replies = round_trip(own_client, [(b"CLIENT", b"KILL", b"ID", own_id, b"SKIPME", b"no"), (b"INCR", key)])
    assert replies[0] == 0
    assert replies[1] == int(own_client.get(key) or 0)


def test_a_client_without_retries_raises_the_connection_error() -> None:
    client = redis.Redis(host="127.0.0.1", port=1, retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0))
    try:
        round_trip(client, [(b"PING",)])
    except redis.ConnectionError:
        pass
    else:
        raise AssertionError("a refused connection must raise redis.ConnectionError")


def test_a_single_connection_client_uses_its_one_connection(own_redis: RedisServer) -> None:  # noqa: F811
    client = redis.Redis(host="127.0.0.1", port=own_redis.port, single_connection_client=True)
    try:
        name = f"wire-{uuid.uuid4().hex[:6]}"
        client.client_setname(name)
        assert round_trip(client, [(b"CLIENT", b"GETNAME")]) == [name.encode()]
        assert client.client_getname() == name  # the lock was released
    finally:
        client.close()
