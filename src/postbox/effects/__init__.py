"""Redis effects: handlers describe changes as data; the engine applies them exactly once.

- :class:`Effects` — the builder a handler fills (``fx.hset(...)``, ``fx.call(...)``, ...).
- :class:`EffectsEngine` — applies ``[(event_id, Effects)]`` for a consumer group and returns one
  :class:`ApplyResult` per event (applied / duplicate / failed).
- :func:`aggregate_keys`, :func:`hash_tag`, :func:`key_slot` — keys that share a cluster slot.
- :func:`check_durability` — whether an acknowledged apply survives a crash.
- Errors: :class:`TransientEffectError` (retry), :class:`PermanentEffectError` and
  :class:`CrossSlotEffectError` (dead-letter), :class:`InvalidEffectError` (handler bug, permanent),
  :class:`EffectEngineError` (stop and look).

See docs/effects.md for the guarantees and limits.
"""

from postbox.effects.builder import MAX_COMMANDS, MAX_ITEMS, EffectCommand, Effects
from postbox.effects.durability import Durability, check_durability
from postbox.effects.engine import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_MARKER_TTL,
    ApplyResult,
    EffectsEngine,
    Outcome,
)
from postbox.effects.keys import KeyLayout, aggregate_keys, hash_tag, key_slot
from postbox.errors import (
    CrossSlotEffectError,
    EffectEngineError,
    EffectError,
    InvalidEffectError,
    PermanentEffectError,
    TransientEffectError,
)

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_MARKER_TTL",
    "MAX_COMMANDS",
    "MAX_ITEMS",
    "ApplyResult",
    "CrossSlotEffectError",
    "Durability",
    "EffectCommand",
    "EffectEngineError",
    "EffectError",
    "Effects",
    "EffectsEngine",
    "InvalidEffectError",
    "KeyLayout",
    "Outcome",
    "PermanentEffectError",
    "TransientEffectError",
    "aggregate_keys",
    "check_durability",
    "hash_tag",
    "key_slot",
]
