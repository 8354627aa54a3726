"""One record must not stop a consumer: a JSON payload with a lone surrogate (``"\\ud83d"``, what
JavaScript writes for a string cut inside an emoji) whose handler raises an error quoting it. The
dead-letter path encoded that text as UTF-8 in the failure stream's XADD and the DLQ headers and
raised UnicodeEncodeError, uncaught: the loop died, and again on every restart, every partition
blocked. Now the failure text is written with the surrogate escaped (``\\ud83d``), the record is
dead-lettered with its original bytes, and the records after it are applied. In the JSON and
the text log format alike."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.support.consumers import ConsumerProcess, committed, create_topic, produce, read_all, router_headers, wait_for

pytestmark = pytest.mark.integration

BAD = b'{"name": "Zo\\ud83d", "seq": 0}'  # the bytes JavaScript's JSON.stringify writes


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_a_lone_surrogate_in_a_failure_is_dead_lettered_and_the_next_record_applies(settings, unique, redis_client, tmp_path, log_format):
    agg = f"sur{unique}{log_format}"
    topic, group = f"outbox.event.{agg}", f"test-sur-{unique}-{log_format}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    bad_id = str(uuid.uuid4())
    records = [(b"a1", BAD, router_headers(bad_id, "Named", agg), 0)]
    records += [(b"a1", json.dumps({"seq": i}).encode(), router_headers(str(uuid.uuid4()), "Counted", agg), 0) for i in (1, 2)]
    produce(settings.kafka_bootstrap, topic, records)
    env = {"POSTBOX_REDIS_URL": settings.redis_url, "POSTBOX_KAFKA_BOOTSTRAP": settings.kafka_bootstrap}
    log = tmp_path / "consumer.log"
    proc = ConsumerProcess("tests.apps.surrogates:app", env, log,
                           ["--group", group, "--topics", topic, "--handler-retries", "0", "--log-format", log_format])  # fmt: skip
    try:
        wait_for(lambda: proc.alive() and committed(settings.kafka_bootstrap, group, topic, 1) == {0: 3}, 60,
                 f"3 committed; log: {proc.output()}")  # fmt: skip
        assert proc.terminate() == 0
    finally:
        proc.close()
    assert [int(s) for s in redis_client.lrange(f"{{{agg}:a1}}:seq", 0, -1)] == [1, 2]
    (letter,) = read_all(settings.kafka_bootstrap, f"{topic}.dlq", 1)
    assert letter.value() == BAD  # the original bytes, untouched
    error = dict(letter.headers())["postbox.error"].decode("utf-8")
    assert "unknown customer name Zo\\ud83d" in error
    text = log.read_text()
    assert "UnicodeEncodeError" not in text and "Logging error" not in text, text[-3000:]
    if log_format == "json":
        for line in text.splitlines():
            if line.startswith("{"):
                json.loads(line)
