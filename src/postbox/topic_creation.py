"""Partitions and replication factor of the outbox topics, per aggregate type.

Debezium creates ``outbox.event.<aggregate_type>`` the first time an event of that type passes,
with the connector's ``topic.creation.default.*`` settings. One aggregate type may need more
partitions (more consumers of a group working in parallel: a group has at most one busy member
per partition) or another replication factor than the rest. The user says so in a small JSON file
(``POSTBOX_TOPICS_FILE``, or ``--topics-file`` of ``postbox connector apply``):

.. code-block:: json

    {"default": {"partitions": 3, "replication_factor": -1},
     "aggregates": {"order": {"partitions": 12}, "payment": {"partitions": 6, "replication_factor": 3}}}

and :func:`apply_topic_creation` turns it into Debezium's topic creation groups
(``topic.creation.groups``, ``topic.creation.<group>.include``, ``.partitions``,
``.replication.factor``) on the connector configuration before it is sent to Connect, so the JSON
connector template stays the one the user reads. It only decides how NEW topics are created; a
topic that exists keeps its partitions until someone grows it (docs/kafka-clients.md says how,
and what that does to the order of an aggregate's events).
"""

from __future__ import annotations

import json
import os
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from postbox.connect_client import ConnectorFile
from postbox.errors import ConfigError
from postbox.topics import TOPIC_PREFIX

ENV_VAR = "POSTBOX_TOPICS_FILE"
ROUTE_KEY = "transforms.outbox.route.topic.replacement"
_AGGREGATE = re.compile(r"[A-Za-z0-9._\-]{1,200}\Z")


@dataclass(frozen=True)
class TopicShape:
    """How many partitions and replicas a new topic gets (None: the connector's default)."""

    partitions: int | None = None
    replication_factor: int | None = None


@dataclass(frozen=True)
class TopicsConfig:
    """The user's topics file: a default shape and one per aggregate type."""

    default: TopicShape = TopicShape()
    aggregates: Mapping[str, TopicShape] = field(default_factory=dict)
    path: Path | None = None

    @classmethod
    def load(cls, path: str | Path | None = None, environ: Mapping[str, str] | None = None) -> "TopicsConfig":
        """Read ``path`` (else ``POSTBOX_TOPICS_FILE``); no file named: nothing to change."""
        env = os.environ if environ is None else environ
        chosen = path or env.get(ENV_VAR)
        if not chosen:
            return cls()
        file = Path(chosen).expanduser()
        try:
            data = json.loads(file.read_text())
        except FileNotFoundError:
            raise ConfigError(f"{ENV_VAR}={file}: no such file", fix="name a JSON file like docs/kafka-clients.md shows") from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{file}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg})") from None
        if not isinstance(data, dict) or set(data) - {"default", "aggregates"}:
            raise ConfigError(f'{file}: expected {{"default": {{...}}, "aggregates": {{"<aggregate_type>": {{...}}}}}}')
        aggregates = data.get("aggregates", {})
        if not isinstance(aggregates, dict):
            raise ConfigError(f'{file}: "aggregates" must map aggregate types to {{"partitions": N, "replication_factor": N}}')
        for name in aggregates:
            if not _AGGREGATE.match(name):
                raise ConfigError(f"{file}: aggregate type {name!r} cannot be part of a topic name (letters, digits, . _ -)")
        return cls(
            default=_shape(file, "default", data.get("default", {})),
            aggregates={name: _shape(file, f"aggregates.{name}", raw) for name, raw in aggregates.items()},
            path=file,
        )


def _shape(file: Path, where: str, raw: Any) -> TopicShape:
    if not isinstance(raw, dict) or set(raw) - {"partitions", "replication_factor"}:
        raise ConfigError(f'{file}: {where} must be {{"partitions": N, "replication_factor": N}}')
    partitions, replicas = raw.get("partitions"), raw.get("replication_factor")
    if partitions is not None and (isinstance(partitions, bool) or not isinstance(partitions, int) or not 1 <= partitions <= 10_000):
        raise ConfigError(f"{file}: {where}.partitions={partitions!r}: expected a whole number from 1 to 10000")
    if replicas is not None and (isinstance(replicas, bool) or not isinstance(replicas, int) or not (replicas == -1 or 1 <= replicas <= 32)):
        raise ConfigError(f"{file}: {where}.replication_factor={replicas!r}: expected -1 (the broker's default) or 1 to 32")
    return TopicShape(partitions, replicas)


def group_name(aggregate_type: str) -> str:
    """A topic creation group name for an aggregate type: letters, digits and _ only (it is part
    of property names), plus a checksum so that "a.b" and "a_b" stay two groups."""
    return "agg_" + re.sub(r"[^A-Za-z0-9]", "_", aggregate_type) + f"_{zlib.crc32(aggregate_type.encode()):08x}"


def connector_with_topics(connector: ConnectorFile, topics: TopicsConfig) -> ConnectorFile:
    """``connector`` as it is sent to Connect: its configuration with the topics file applied."""
    return replace(connector, config=apply_topic_creation(connector.config, topics))


def apply_topic_creation(config: Mapping[str, str], topics: TopicsConfig) -> dict[str, str]:
    """The connector configuration with the topics file's shapes as Debezium topic creation groups."""
    out = dict(config)
    _set_shape(out, "default", topics.default)
    route = config.get(ROUTE_KEY, TOPIC_PREFIX + "${routedByValue}")
    groups = []
    for aggregate, shape in sorted(topics.aggregates.items()):
        name = group_name(aggregate)
        groups.append(name)
        out[f"topic.creation.{name}.include"] = re.escape(route.replace("${routedByValue}", aggregate))
        _set_shape(out, name, shape)
    if groups:
        out["topic.creation.groups"] = ",".join(groups)
    return out


def _set_shape(config: dict[str, str], group: str, shape: TopicShape) -> None:
    if shape.partitions is not None:
        config[f"topic.creation.{group}.partitions"] = str(shape.partitions)
    if shape.replication_factor is not None:
        config[f"topic.creation.{group}.replication.factor"] = str(shape.replication_factor)
