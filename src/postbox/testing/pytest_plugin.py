"""pytest fixtures for testing handlers against a real Redis with no Redis of your own.

Installed with postbox-cdc (the ``pytest11`` entry point), so a test names them and nothing else:
``postbox_redis`` is the URL of one private :class:`~postbox.testing.RedisServer` for the whole
session (started on first use, stopped at the end), or ``POSTBOX_TEST_REDIS_URL`` when set;
``effects_harness`` is an :class:`~postbox.testing.EffectsHarness` on it with a group of its own,
its keys deleted after the test (naming ``POSTBOX_TEST_REDIS_URL`` says that Redis is the
tests'). This module imports nothing heavy: a pytest run that uses neither
fixture does not import redis-py or start a server.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from postbox.testing.harness import EffectsHarness

URL_ENV = "POSTBOX_TEST_REDIS_URL"


@pytest.fixture(scope="session")
def postbox_redis() -> Iterator[str]:
    """The URL of the session's Redis: a private server, or ``POSTBOX_TEST_REDIS_URL``."""
    given = os.environ.get(URL_ENV)
    if given:
        yield given
        return
    from postbox.testing.server import RedisServer

    with RedisServer() as server:
        yield server.url


@pytest.fixture
def effects_harness(postbox_redis: str) -> Iterator["EffectsHarness"]:
    """A harness on the session's Redis; its group and keys are this test's alone (deleted after
    it: the session's server is the tests', and so is ``POSTBOX_TEST_REDIS_URL``'s by its docs)."""
    from postbox.testing.harness import EffectsHarness

    with EffectsHarness(postbox_redis, cleanup=True) as harness:
        yield harness
