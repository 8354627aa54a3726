"""Test app for #12.9 (tests/integration/test_effects_config_errors.py): effects the deployment
refuses, the same for every event. Run with ``POSTBOX_LUA_DIR=tests/apps/config_lua`` as the stack's
ACL user ``postbox_consumer``.

- ``Counted``: like ``tests.apps.counting``.
- ``LuaOutsideAcl``: the user function ``outside_acl`` writes ``outside:<aggregate_id>`` (outside the
  ACL's key patterns) after writing its own key.
- ``LuaForbidden``: the user function ``forbidden_command`` runs CONFIG GET (not in the user's ACL).
- ``MissingFunction``: calls ``not_deployed``, whose .lua file does not exist.
"""

from __future__ import annotations

from postbox.consumer import App
from postbox.effects import Effects, aggregate_keys
from postbox.events import Event
from tests.apps.counting import record

app = App()


@app.handler("*", "Counted")
def counted(event: Event, fx: Effects) -> None:
    record(event, fx)


@app.handler("*", "LuaOutsideAcl")
def lua_outside_acl(event: Event, fx: Effects) -> None:
    fx.call("outside_acl", keys=[aggregate_keys(event.aggregate_type, event.aggregate_id)("fn")], args=[event.aggregate_id])


@app.handler("*", "LuaForbidden")
def lua_forbidden(event: Event, fx: Effects) -> None:
    fx.call("forbidden_command", keys=[aggregate_keys(event.aggregate_type, event.aggregate_id)("fn")])


@app.handler("*", "MissingFunction")
def missing_function(event: Event, fx: Effects) -> None:
    fx.call("not_deployed", keys=[aggregate_keys(event.aggregate_type, event.aggregate_id)("fn")])
