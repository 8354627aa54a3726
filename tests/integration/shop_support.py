"""The reference shop's handler tests share one fixture: the effects harness on the stack's Redis,
with the shop's key prefix made unique per test so tests never see each other's keys."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from consumers.shop import keys
from postbox.testing import EffectsHarness


@pytest.fixture
def harness(monkeypatch: pytest.MonkeyPatch) -> Iterator[EffectsHarness]:
    monkeypatch.setattr(keys, "PREFIX", f"test{uuid.uuid4().hex[:8]}")
    with EffectsHarness() as h:
        yield h
