"""Redis effects: handlers describe changes as data; the engine applies them exactly once.

- :class:`Effects` — the builder a handler fills (``fx.hset(...)``, ``fx.call(...)``, ...).
- :class:`EffectsEngine` — applies ``[(EventRef, Effects)]`` for a consumer group and returns one
  :class:`ApplyResult` per event (applied / duplicate / failed).
- :class:`EventRef`, :func:`event_ref` — an event's identity for the engine: its id and routing tag
  (the dedupe marker is a function of the group and this, never of the effects).
- :func:`aggregate_keys` (a :class:`KeyMaker`), :func:`hash_tag`, :func:`key_slot` — keys that share a cluster slot.
- :func:`check_durability` — whether an acknowledged apply survives a crash.
- Errors: :class:`TransientEffectError` (retry), :class:`PermanentEffectError` and
  :class:`CrossSlotEffectError` (dead-letter), :class:`InvalidEffectError` (handler bug, permanent),
  :class:`EffectEngineError` (stop and look) and its :class:`EffectConfigError` (the deployment: an
  ACL refusal, a missing Lua function file — stop with the fix, dead-letter nothing).

See docs/effects.md for the guarantees and limits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from postbox.lazy_exports import lazy_exports

from postbox.effects.builder import MAX_COMMANDS, MAX_ITEMS, EffectCommand, Effects
from postbox.effects.keys import EventRef, KeyLayout, KeyMaker, RoutingKey, aggregate_keys, event_ref, hash_tag, key_slot
from postbox.errors import (
    CrossSlotEffectError,
    EffectConfigError,
    EffectEngineError,
    EffectError,
    InvalidEffectError,
    PermanentEffectError,
    TransientEffectError,
)

if TYPE_CHECKING:
    from postbox.effects.durability import Durability, check_durability
    from postbox.effects.engine import DEFAULT_BATCH_SIZE, DEFAULT_MARKER_TTL, ApplyResult, EffectsEngine, Outcome

#: Names loaded on first use, by module: these two import redis-py, whose import (with its
#: OpenTelemetry hooks) costs ~0.3 s of CPU. A handler's module, the key helpers and every CLI
#: command that never talks to Redis (``postbox topics``, ``lag``, ``tail``, ... which read the
#: local stack's settings through :mod:`postbox.effects.acl`) then start without it.
_LAZY = {
    "Durability": "postbox.effects.durability",
    "check_durability": "postbox.effects.durability",
    "DEFAULT_BATCH_SIZE": "postbox.effects.engine",
    "DEFAULT_MARKER_TTL": "postbox.effects.engine",
    "ApplyResult": "postbox.effects.engine",
    "EffectsEngine": "postbox.effects.engine",
    "Outcome": "postbox.effects.engine",
}


if not TYPE_CHECKING:  # a type checker sees the imports above: a misspelt name stays an error there
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())


__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_MARKER_TTL",
    "MAX_COMMANDS",
    "MAX_ITEMS",
    "ApplyResult",
    "CrossSlotEffectError",
    "Durability",
    "EffectCommand",
    "EffectConfigError",
    "EffectEngineError",
    "EffectError",
    "Effects",
    "EffectsEngine",
    "EventRef",
    "InvalidEffectError",
    "KeyLayout",
    "KeyMaker",
    "Outcome",
    "PermanentEffectError",
    "RoutingKey",
    "TransientEffectError",
    "aggregate_keys",
    "check_durability",
    "event_ref",
    "hash_tag",
    "key_slot",
]
