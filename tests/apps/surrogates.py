"""Test app for a payload string with a lone surrogate (tests/integration/test_consumer_surrogates.py).

JavaScript writes a string cut inside an emoji as ``"\\ud83d"``: valid JSON, a lone surrogate once
decoded, which no UTF-8 encoder accepts. ``Named`` events raise an error quoting the name (a
handler's ordinary ``ValueError(f"... {name}")``); ``Counted`` events count as ``tests.apps.counting``
does, so the test sees the records after the bad one applied.
"""

from __future__ import annotations

import logging

from postbox.consumer import App
from postbox.effects import Effects, aggregate_keys
from postbox.events import Event

app = App("surrogates")
log = logging.getLogger("shop.surrogates_test")


@app.handler(event_type="Named")
def named(event: Event, fx: Effects) -> None:
    log.warning("refusing customer %s", event.payload["name"])
    raise ValueError(f"unknown customer name {event.payload['name']!s}")


@app.handler(event_type="Counted")
def counted(event: Event, fx: Effects) -> None:
    fx.rpush(aggregate_keys(event.aggregate_type, event.aggregate_id)("seq"), str(event.payload["seq"]))
