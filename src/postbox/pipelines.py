"""Which outbox pipeline: the one place that says what a pipeline name sets.

Several services may share one PostgreSQL cluster (each in its own database, or side by side in
one), each with its own outbox, replication slot and connector, so that one stalled connector holds
back nobody else's retention. A pipeline name picks them all:

========================  ==========================  ================================
                          default pipeline            pipeline ``billing``
========================  ==========================  ================================
outbox schema / table     ``postbox.outbox``          ``postbox_billing.outbox``
replication slot          ``postbox_outbox``          ``postbox_billing_outbox``
publication               ``postbox_outbox``          ``postbox_billing_outbox``
Debezium connector        ``postbox-outbox``          ``postbox-billing-outbox``
Debezium ``topic.prefix`` ``postbox``                 ``postbox_billing``
========================  ==========================  ================================

Every name derives from the schema, so two pipelines never share one: the slot is cluster-wide,
the connector name and ``topic.prefix`` key the connector's offsets and its heartbeat topic in
Connect and Kafka. The events' topics are not the pipeline's: every pipeline routes to
``outbox.event.<aggregate_type>`` (:mod:`postbox.topics`, the wire contract), so consumers read a
service's events whatever pipeline carried them. The roles (``postbox_app``, ``postbox_cdc``, ...)
are the cluster's and shared by its pipelines.

The name comes from ``--pipeline``, else ``POSTBOX_PIPELINE``, else the default. It is lower-case
letters, digits and ``_`` because a replication slot name may hold nothing else, and short enough
that every derived name fits PostgreSQL's 63-byte identifiers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from postbox.errors import ConfigError
from postbox.secret_env import env_value

ENV = "POSTBOX_PIPELINE"
FLAG = "--pipeline"
DEFAULT_PIPELINE = "default"
#: The schema of the default pipeline (and the prefix of every other pipeline's).
DEFAULT_SCHEMA = "postbox"
MAX_NAME = 40
_NAME = re.compile(rf"[a-z][a-z0-9_]{{0,{MAX_NAME - 1}}}\Z")
ALLOWED = f"1 to {MAX_NAME} characters of a-z, 0-9 and _"


@dataclass(frozen=True)
class Pipeline:
    """One service's outbox pipeline and the names it owns (see the module docstring)."""

    name: str = DEFAULT_PIPELINE

    def __post_init__(self) -> None:
        check_name(self.name, f"pipeline name {self.name!r}")

    @classmethod
    def parse(cls, value: "str | Pipeline | None" = None, environ: Mapping[str, str] | None = None) -> "Pipeline":
        """``value`` (a flag or an argument), else ``POSTBOX_PIPELINE``, else the default pipeline;
        a :class:`ConfigError` naming where a bad name came from."""
        if isinstance(value, Pipeline):
            return value
        if value:
            check_name(value, f"{FLAG} {value!r}")
            return cls(value)
        named = env_value(ENV, environ)
        if named:
            check_name(named, f"{ENV}={named!r}")
            return cls(named)
        return cls()

    @property
    def is_default(self) -> bool:
        return self.name == DEFAULT_PIPELINE

    @property
    def flag(self) -> str:
        """`` --pipeline NAME`` for a named pipeline, nothing for the default: what a fix appends
        to the command it names."""
        return "" if self.is_default else f" {FLAG} {self.name}"

    @property
    def schema(self) -> str:
        """The schema holding the outbox, its partitions, functions and retention bookkeeping."""
        return DEFAULT_SCHEMA if self.is_default else f"{DEFAULT_SCHEMA}_{self.name}"

    @property
    def table(self) -> str:
        """The outbox table, schema-qualified."""
        return f"{self.schema}.outbox"

    @property
    def slot(self) -> str:
        """The logical replication slot the connector reads (one per cluster per pipeline)."""
        return f"{self.schema}_outbox"

    @property
    def publication(self) -> str:
        """The publication of the outbox's inserts (a database's; named like the slot)."""
        return f"{self.schema}_outbox"

    @property
    def connector(self) -> str:
        """The Debezium connector's name on Kafka Connect."""
        return f"{self.schema.replace('_', '-')}-outbox"

    @property
    def topic_prefix(self) -> str:
        """Debezium's ``topic.prefix``: the key of the connector's source offsets and the name of
        its heartbeat topic, so it must be the pipeline's own."""
        return self.schema

    @property
    def retention_lock(self) -> str:
        """The advisory-lock key that keeps one retention run at a time on this pipeline's outbox."""
        return f"{self.table}.retention"

    def sql(self, text: str) -> str:
        """``text`` with ``{schema}`` and ``{publication}`` replaced by this pipeline's names.

        SQL (in ``.sql`` files and in the code) is written once with these two placeholders. The
        names are validated to ``[a-z][a-z0-9_]*``, so they need no quoting, as an identifier or
        inside a string literal; no other brace in the text is touched.
        """
        return text.replace("{schema}", self.schema).replace("{publication}", self.publication)

    def connector_settings(self, database: str | None = None) -> dict[str, str]:
        """The Debezium settings that carry this pipeline's names (over the connector template);
        ``database``: the database the connector captures, when not the Connect worker's
        ``POSTBOX_CDC_DB_NAME``."""
        settings = {
            "slot.name": self.slot,
            "publication.name": self.publication,
            "table.include.list": self.table,
            "topic.prefix": self.topic_prefix,
            # the topic Debezium names the outbox's change events before the router reroutes them
            "predicates.isOutboxTable.pattern": rf"{re.escape(self.topic_prefix)}\.{re.escape(self.schema)}\.outbox",
        }
        if database is not None:
            settings["database.dbname"] = database
        return settings

    def describe(self) -> str:
        """``pipeline billing (postbox_billing.outbox, slot postbox_billing_outbox, connector ...)``."""
        return f"pipeline {self.name} ({self.table}, slot {self.slot}, connector {self.connector})"


def check_name(name: str, where: str) -> None:
    """Raise a ConfigError naming ``where`` unless ``name`` is a legal pipeline name."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(
            f"{where} is not a pipeline name: use {ALLOWED}, starting with a letter",
            fix=f"e.g. billing: the name becomes part of the replication slot's ({DEFAULT_SCHEMA}_<name>_outbox), "
                "which PostgreSQL restricts to lower-case letters, digits and _",
        )


DEFAULT = Pipeline()

__all__ = ["ALLOWED", "DEFAULT", "DEFAULT_PIPELINE", "DEFAULT_SCHEMA", "ENV", "FLAG", "Pipeline", "check_name"]
