"""Handlers of the bad-input catalogue: each event type exercises one way an effect can go wrong."""

from __future__ import annotations

from postbox.consumer import App
from postbox.effects import Effects, aggregate_keys
from postbox.events import Event
from tests.apps.counting import record

#: Strings that would do harm if anything built Lua or RESP by concatenation.
INJECTIONS = (
    "x') redis.call('FLUSHALL') --",
    "]]..redis.call('SET','pwned','1')..[[",
    "*1\r\n$8\r\nFLUSHALL\r\n",
    "\x00\xff{}[]\"'\\",
)

app = App()


@app.handler("*", "Counted")
def counted(event: Event, fx: Effects) -> None:
    record(event, fx)


@app.handler("*", "Boom")
def boom(event: Event, fx: Effects) -> None:
    record(event, fx)
    raise ValueError(f"boom on {event.id}")


@app.handler("*", "FiveCommands")
def five(event: Event, fx: Effects) -> None:
    """Five commands; the third hits ``...:str``, which the test made a string: WRONGTYPE."""
    k = aggregate_keys(event.aggregate_type, event.aggregate_id)
    fx.rpush(k("seq"), event.payload["seq"])           # 1
    fx.hincrby(k("count"), "n", 1)                      # 2
    fx.hset(k("str"), "field", "value")                 # 3: WRONGTYPE
    fx.sadd(k("set"), "member")                         # 4
    fx.incrby(k("counter"), 1)                          # 5


@app.handler("*", "Injection")
def injection(event: Event, fx: Effects) -> None:
    k = aggregate_keys(event.aggregate_type, event.aggregate_id)
    for i, text in enumerate(INJECTIONS):
        fx.hset(k("inj"), text, text)
        fx.set(k(f"inj:{i}:{text}"), text)
    record(event, fx)
