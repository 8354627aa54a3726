"""The engine refuses a batch with a malformed pair before sending anything, naming the pair
(#14.2: the checks now run in one loop over the batch, EffectsEngine._prepare_all). The client
points at a closed port: any attempt to send would fail differently."""

from __future__ import annotations

import pytest
import redis

from postbox.effects import Effects, EffectsEngine, EventRef
from postbox.errors import InvalidEffectError


@pytest.fixture
def engine() -> EffectsEngine:
    return EffectsEngine(redis.Redis(host="127.0.0.1", port=1), "g", functions_dir=None)


def good() -> tuple[EventRef, Effects]:
    return EventRef("e-1", "order:1"), Effects().hincrby("{order:1}:totals", "cents", 1)


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        (("e-2", Effects()), "event #1: expected an EventRef with a non-empty id, got 'e-2'"),
        ((EventRef("", "order:2"), Effects()), "event #1: expected an EventRef with a non-empty id"),
        ((EventRef("e-2", "order:2"), {"hincrby": 1}), "event e-2: expected an Effects, got dict"),
        ((EventRef("e-2", "order:2"), None), "event e-2: expected an Effects, got NoneType"),
    ],
)
def test_a_malformed_pair_is_refused_by_its_position_or_id(engine: EffectsEngine, bad: tuple[object, object], named: str) -> None:
    with pytest.raises(InvalidEffectError) as caught:
        engine.apply_outcomes([good(), bad])  # type: ignore[list-item]  # the malformed pair under test
    assert named in str(caught.value)
