"""#14.2: ``EffectsEngine.apply_outcomes`` — what the consumer runtime calls — gives an applied or
duplicate event's verdict as the outcome itself (no result object per event that went well) and
any other as its full result; ``apply`` still gives every event its full ``ApplyResult``. Both on a
real redis-server, in one batch mixing applied, duplicate and failed events, with the same effects
in Redis. Shown to fail (scratch edit) with the engine's reply codes 1 and 2 swapped in _results
(the verdicts no longer match, apply's results neither)."""

from __future__ import annotations

import pytest
import redis

from postbox.effects import ApplyResult, Effects, EffectsEngine, Outcome
from tests.integration.conftest_effects import (  # noqa: F401 - fixtures
    engine,
    fresh_redis,
    own_client,
    own_redis,
    ref,
    tag,
)

pytestmark = pytest.mark.integration


def test_outcomes_for_what_went_well_full_results_for_the_rest(engine: EffectsEngine, own_client: redis.Redis, tag: str) -> None:
    own_client.set(f"{tag}:str", "text")
    seen, new, bad = ref(tag), ref(tag), ref(tag)
    assert engine.apply_one(seen, Effects().incrby(f"{tag}:n", 1)).applied
    verdicts = engine.apply_outcomes([
        (seen, Effects().incrby(f"{tag}:n", 1)),       # its marker is there: duplicate
        (new, Effects().incrby(f"{tag}:n", 10)),        # applied
        (bad, Effects().incrby(f"{tag}:str", 1)),       # WRONGTYPE-like: failed, undone
    ])  # fmt: skip
    assert verdicts[:2] == [Outcome.DUPLICATE, Outcome.APPLIED]
    failed = verdicts[2]
    assert isinstance(failed, ApplyResult) and failed.failed and failed.event_id == bad.id and failed.op == "incrby"
    assert own_client.get(f"{tag}:n") == b"11"

    again = engine.apply([(new, Effects().incrby(f"{tag}:n", 10)), (ref(tag), Effects().incrby(f"{tag}:n", 100))])
    assert [(r.event_id, r.outcome) for r in again] == [(new.id, Outcome.DUPLICATE), (again[1].event_id, Outcome.APPLIED)]
    assert all(isinstance(r, ApplyResult) and r.error is None for r in again)
    assert own_client.get(f"{tag}:n") == b"111"
