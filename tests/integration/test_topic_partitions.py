"""#13.2 partitions per aggregate type, on the real pipeline: Debezium creates the topic of an
aggregate named in the topics file with its partitions, the others with the default (3)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from confluent_kafka.admin import AdminClient

from tests.integration.incident_support import cli_json, insert
from tests.support.consumers import wait_for
from tests.support.kafka import drop_topics

# disruptive (runs alone, after the tests that share the stack): changes the Debezium connector's configuration and restarts it.
pytestmark = [pytest.mark.integration, pytest.mark.disruptive]


def _partitions(bootstrap: str, topic: str) -> int:
    """The topic's partition count, 0 while it does not exist. Asks for ALL topics: a metadata
    request naming the topic would make the broker auto-create it (with num.partitions)."""
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics.get(topic)
    return 0 if meta is None or meta.error is not None else len(meta.partitions)


def _task_has_groups(connect_url: str) -> bool:
    tasks = httpx.get(f"{connect_url}/connectors/postbox-outbox/tasks", timeout=10).json()
    return bool(tasks) and all("topic.creation.groups" in t["config"] for t in tasks)


def test_new_topics_get_their_aggregates_partitions(settings, pg_conn, unique: str, tmp_path: Path) -> None:
    wide, plain = f"wide{unique}", f"plain{unique}"
    topics_file = tmp_path / "topics.json"
    topics_file.write_text(json.dumps({"aggregates": {wide: {"partitions": 5, "replication_factor": 1}}}))
    applied = cli_json("connector", "apply", "--topics-file", str(topics_file), "--yes", "--wait", "60")
    try:
        assert applied["outcome"] != "unchanged" and "topic.creation.groups" in applied["changed"]
        # Connect hands the new configuration to the task asynchronously: until the task runs it,
        # the old task could still create the topic with the old defaults. Wait for the task's
        # config, then restart connector and tasks (status RESTARTING until they run it).
        wait_for(lambda: _task_has_groups(settings.connect_url), 60, "the task config with topic.creation.groups")
        cli_json("connector", "restart", "--yes", "--wait", "60")
        insert(pg_conn, wide, "w1", "Counted", {"seq": 1})
        insert(pg_conn, plain, "p1", "Counted", {"seq": 1})
        for topic in (f"outbox.event.{wide}", f"outbox.event.{plain}"):
            wait_for(lambda t=topic: _partitions(settings.kafka_bootstrap, t) > 0, 90, f"{topic} created by Debezium")
        assert _partitions(settings.kafka_bootstrap, f"outbox.event.{wide}") == 5
        assert _partitions(settings.kafka_bootstrap, f"outbox.event.{plain}") == 3
    finally:
        restored = cli_json("connector", "apply", "--yes", "--wait", "60")  # back to the packaged template
        drop_topics(settings.kafka_bootstrap, f"outbox.event.{wide}", f"outbox.event.{plain}")
        assert "topic.creation.groups" in restored["changed"]
