"""Topic naming: the one place that says where an event goes and what Kafka accepts as a name.

The Outbox Event Router routes a row to ``outbox.event.<aggregate_type>``; a consumer dead-letters
to ``<topic>.dlq``. Kafka accepts topic names of at most 249 characters from ``[A-Za-z0-9._-]``
(``org.apache.kafka.common.internals.Topic``), so an aggregate type is legal only if both the topic
and its dead-letter topic are.
"""

from __future__ import annotations

TOPIC_PREFIX = "outbox.event."
DLQ_SUFFIX = ".dlq"
#: Kafka's longest topic name (``Topic.MAX_NAME_LENGTH``).
MAX_TOPIC_NAME = 249
#: Kafka's legal topic-name characters, as a regular expression class (also used in SQL).
TOPIC_CHARS = "A-Za-z0-9._-"


def topic_for(aggregate_type: str) -> str:
    """The topic the router sends ``aggregate_type``'s events to."""
    return TOPIC_PREFIX + aggregate_type


__all__ = ["DLQ_SUFFIX", "MAX_TOPIC_NAME", "TOPIC_CHARS", "TOPIC_PREFIX", "topic_for"]
