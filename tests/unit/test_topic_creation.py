"""#13.2 partitions per aggregate type: the topics file becomes Debezium topic creation groups."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from postbox.connect_client import ConnectorFile
from postbox.errors import ConfigError
from postbox.resources import CONNECTOR_TEMPLATE
from postbox.topic_creation import TopicsConfig, apply_topic_creation, connector_with_topics, group_name


def _file(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "topics.json"
    path.write_text(json.dumps(data))
    return path


def test_groups_match_exactly_their_aggregates_topic(tmp_path: Path) -> None:
    topics = TopicsConfig.load(_file(tmp_path, {"default": {"partitions": 4},
                                                "aggregates": {"order": {"partitions": 12, "replication_factor": 3},
                                                               "order.v2": {"partitions": 2}}}))  # fmt: skip
    connector = connector_with_topics(ConnectorFile.load(CONNECTOR_TEMPLATE), topics)
    config = connector.config
    assert config["topic.creation.default.partitions"] == "4"
    groups = config["topic.creation.groups"].split(",")
    assert len(groups) == 2
    order, v2 = group_name("order"), group_name("order.v2")
    assert (config[f"topic.creation.{order}.partitions"], config[f"topic.creation.{order}.replication.factor"]) == ("12", "3")
    assert f"topic.creation.{v2}.replication.factor" not in config  # inherits the default group's
    # Connect matches include patterns against whole topic names (Java regex; these escapes are the same)
    for topic, expected in [("outbox.event.order", order), ("outbox.event.order.v2", v2), ("outbox.event.orderX", None),
                            ("outbox.event.order.dlq", None), ("outbox-event-order", None)]:  # fmt: skip
        matched = [g for g in groups if re.fullmatch(config[f"topic.creation.{g}.include"], topic)]
        assert matched == ([expected] if expected else []), topic
    assert ConnectorFile.load(CONNECTOR_TEMPLATE).config["topic.creation.default.partitions"] == "3"  # template untouched


def test_group_names_are_property_safe_and_distinct() -> None:
    names = {group_name(a) for a in ("a.b", "a_b", "a-b", "A.b")}
    assert len(names) == 4 and all(re.fullmatch(r"[A-Za-z0-9_]+", n) for n in names)


def test_no_file_changes_nothing() -> None:
    config = ConnectorFile.load(CONNECTOR_TEMPLATE).config
    assert apply_topic_creation(config, TopicsConfig.load(environ={})) == config


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"aggregates": {"order": {"partitions": 0}}}, r"aggregates.order.partitions=0: expected a whole number"),
        ({"aggregates": {"order": {"partitions": "12"}}}, r"partitions='12'"),
        ({"default": {"replication_factor": 0}}, r"default.replication_factor=0: expected -1"),
        ({"aggregates": {"or der": {}}}, r"aggregate type 'or der' cannot be part of a topic name"),
        ({"aggregates": {"order": {"partitons": 3}}}, r"aggregates.order must be"),
        ({"topics": {}}, r"expected"),
    ],
)
def test_bad_topics_file_names_the_place(tmp_path: Path, data: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TopicsConfig.load(_file(tmp_path, data))


def test_missing_file_named_by_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="POSTBOX_TOPICS_FILE=.*no such file"):
        TopicsConfig.load(environ={"POSTBOX_TOPICS_FILE": str(tmp_path / "nope.json")})
