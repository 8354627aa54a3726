"""Test app for the tests of documented consumer behaviours (tests/integration/test_consumer_documented.py).

``app`` routes by event type on any aggregate:

- ``Counted``: like ``tests.apps.counting`` (``{<agg>:<id>}:seq`` list + ``...:count`` hash).
- ``OutsideAcl``: sets ``outside:<aggregate_id>``, a key outside the consumer user's ACL patterns
  (``postbox:*``, ``{*``): the effects engine's apply is refused by Redis.
- ``Transient``: raises :class:`TransientEffectError` while :data:`transient_gate` is closed (the
  test opens it), then counts like ``Counted``. :data:`transient_attempts` counts the calls per event.
- ``Invalid``: describes an empty ``hset`` (the builder raises :class:`InvalidEffectError`);
  :data:`invalid_attempts` counts the calls per event, to show it is not retried.
- ``Slow``: prints ``slow handler started`` on stdout, sleeps ``POSTBOX_TEST_SLOW_S`` seconds
  (default 2), then counts like ``Counted`` — so a test knows a batch is inside its handlers.

The gates and counters are module state: they work for a runtime in the test's own process
(``ThreadedRuntime``), not for a ``postbox consume`` subprocess.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter

from postbox.consumer import App
from postbox.effects import Effects, aggregate_keys
from postbox.errors import TransientEffectError
from postbox.events import Event
from tests.apps.counting import record

app = App()

transient_gate = threading.Event()
transient_attempts: Counter[str] = Counter()
invalid_attempts: Counter[str] = Counter()


@app.handler("*", "Counted")
def counted(event: Event, fx: Effects) -> None:
    record(event, fx)


@app.handler("*", "OutsideAcl")
def outside_acl(event: Event, fx: Effects) -> None:
    fx.set(f"outside:{event.aggregate_id}", "written by a handler outside the ACL's key patterns")


@app.handler("*", "Transient")
def transient(event: Event, fx: Effects) -> None:
    transient_attempts[event.id] += 1
    if not transient_gate.is_set():
        raise TransientEffectError(f"dependency of {event.id} not ready", reason="test-gate")
    record(event, fx)


@app.handler("*", "Invalid")
def invalid(event: Event, fx: Effects) -> None:
    invalid_attempts[event.id] += 1
    fx.hset(aggregate_keys(event.aggregate_type, event.aggregate_id)("state"), {})


@app.handler("*", "Slow")
def slow(event: Event, fx: Effects) -> None:
    print(f"slow handler started on {event.id}", flush=True)
    time.sleep(float(os.environ.get("POSTBOX_TEST_SLOW_S", "2")))
    record(event, fx)
