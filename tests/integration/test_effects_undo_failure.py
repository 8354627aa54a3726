"""What must happen when an event's undo itself fails, and when the script answers with an error
the engine does not know: stop, never dead-letter or retry for ever. An undo that fails leaves
the event's keys partly changed: dead-lettering it and moving on (what a plain failure gets)
would commit past a half-applied event. An unknown error reply is no outage: retrying it for
ever would hide a bug. A private redis-server whose consumer user may not RESTORE makes a real
undo fail (the undo of a SET restores the key's DUMP)."""

from __future__ import annotations

import uuid

import pytest

from postbox.effects import Effects, EffectsEngine, EventRef, Outcome
from postbox.errors import EffectEngineError
from postbox.testing.server import RedisServer
from tests.support.consumers import ConsumerProcess, committed, create_topic, json_event, produce, read_all

pytestmark = pytest.mark.integration


@pytest.fixture
def no_restore():
    """A private server and the URL of a user that may do everything but RESTORE."""
    with RedisServer() as server, server.client() as admin:
        admin.execute_command("ACL", "SETUSER", "consumer", "on", ">pw", "~*", "&*", "+@all", "-restore")
        yield server, f"redis://consumer:pw@127.0.0.1:{server.port}/0"


def test_a_failed_undo_is_an_engine_error_not_a_plain_failure(no_restore):
    server, url = no_restore
    import redis

    with redis.Redis.from_url(url) as client, server.client() as admin:
        admin.set("{u:1}:name", "before")
        admin.set("{u:1}:str", "a string")
        engine = EffectsEngine(client, "undo", functions_dir=None)
        ref = EventRef(str(uuid.uuid4()), "u:1")
        (result,) = engine.apply([(ref, Effects().set("{u:1}:name", "after").sadd("{u:1}:str", "m"))])
        assert result.outcome is Outcome.FAILED and result.error.startswith("WRONGTYPE")
        assert result.undo_error and "can't run this command" in result.undo_error  # the RESTORE refused
        with pytest.raises(EffectEngineError, match="then the undo failed"):
            result.raise_for_failure()
        assert not admin.exists(engine.marker_key(ref))  # never marked applied


def test_the_consumer_stops_on_a_failed_undo_committing_and_dead_lettering_nothing(settings, unique, tmp_path, no_restore):
    server, url = no_restore
    agg = f"undo{unique}"
    topic, group = f"outbox.event.{agg}", f"test-undo-{unique}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    with server.client() as admin:
        admin.set(f"{{{agg}:a1}}:name", "before")  # its undo is a RESTORE, which the user may not run
        admin.set(f"{{{agg}:a1}}:seq", "a string: the RPUSH fails WRONGTYPE")
    produce(settings.kafka_bootstrap, topic, [json_event(agg, "a1", "Clobber", 0, partition=0)])
    env = {"POSTBOX_REDIS_URL": url, "POSTBOX_KAFKA_BOOTSTRAP": settings.kafka_bootstrap}
    proc = ConsumerProcess("tests.apps.undo_failure:app", env, tmp_path / "consumer.log", ["--group", group, "--topics", topic])
    try:
        code = proc.process.wait(timeout=90)
        out = proc.output()
        assert code == 3, out
        assert "the undo failed" in out and "fix:" in out, out
        assert committed(settings.kafka_bootstrap, group, topic, 1) == {0: -1001}
        assert read_all(settings.kafka_bootstrap, f"{topic}.dlq", expect=1, timeout=3) == []
    finally:
        proc.close()
