"""Fault-suite fixtures: one scenario at a time against the running stack, which it leaves fully up."""

from __future__ import annotations

import pytest

from tests.faults.harness import soak_enabled


def pytest_addoption(parser) -> None:
    # Registered when tests/faults is on the command line (`pytest tests/faults --soak`);
    # POSTBOX_SOAK=1 works from anywhere.
    parser.addoption("--soak", action="store_true", default=False, help="fault suite: run the long soak (100,000 events)")


@pytest.fixture
def soak(request) -> bool:
    """True with `pytest --soak` or POSTBOX_SOAK=1: the long mode."""
    return soak_enabled(request.config)


@pytest.fixture
def show(capsys):
    """Print to the terminal even without -s (the figures are the point of these tests)."""
    def out(text: str) -> None:
        with capsys.disabled():
            print(text, flush=True)
    return out
