"""Test app whose event's undo fails (tests/integration/test_effects_undo_failure.py): ``Clobber``
SETs ``{<agg>:<id>}:name`` (the test made it exist: undone by RESTORE of its DUMP, which the test's user
may not run),
then RPUSHes to ``...:seq``, which the test made a string: WRONGTYPE, then the undo is refused."""

from __future__ import annotations

from postbox.consumer import App
from postbox.effects import Effects, aggregate_keys
from postbox.events import Event

app = App("undo_failure")


@app.handler(event_type="Clobber")
def clobber(event: Event, fx: Effects) -> None:
    k = aggregate_keys(event.aggregate_type, event.aggregate_id)
    fx.set(k("name"), "after").rpush(k("seq"), "0")
