"""Several services on one PostgreSQL cluster: a pipeline name sets every name one service's
outbox pipeline owns, and the default pipeline keeps the names postbox always had."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, strategies as st

from postbox.connect_client import ConnectorFile
from postbox.connector import render_connector
from postbox.errors import ConfigError
from postbox.pipelines import DEFAULT_PIPELINE, ENV, Pipeline
from postbox.resources import CONNECTOR_TEMPLATE

NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,39}", fullmatch=True)


def test_the_default_pipeline_keeps_todays_names():
    p = Pipeline.parse(None, environ={})
    assert p.name == DEFAULT_PIPELINE == "default" and p.is_default
    assert (p.schema, p.table, p.slot, p.publication, p.connector, p.topic_prefix) == (
        "postbox", "postbox.outbox", "postbox_outbox", "postbox_outbox", "postbox-outbox", "postbox")


def test_a_named_pipeline_owns_its_schema_slot_publication_connector_and_prefix():
    p = Pipeline.parse("billing", environ={})
    assert (p.schema, p.table, p.slot, p.publication, p.connector, p.topic_prefix) == (
        "postbox_billing", "postbox_billing.outbox", "postbox_billing_outbox", "postbox_billing_outbox",
        "postbox-billing-outbox", "postbox_billing")


def test_the_flag_wins_over_the_environment_variable_which_wins_over_the_default():
    assert Pipeline.parse(None, environ={ENV: "billing"}).name == "billing"
    assert Pipeline.parse("orders", environ={ENV: "billing"}).name == "orders"
    assert Pipeline.parse("", environ={ENV: ""}).is_default
    assert Pipeline.parse(Pipeline("orders"), environ={ENV: "billing"}).name == "orders"


@pytest.mark.parametrize("bad", ["Billing", "1st", "bill-ing", "bill ing", "x" * 41, "bill;drop", "é"])
def test_a_bad_name_is_refused_naming_the_value_the_setting_and_the_allowed_characters(bad):
    with pytest.raises(ConfigError) as flag:
        Pipeline.parse(bad, environ={})
    assert repr(bad) in flag.value.message and "a-z, 0-9 and _" in flag.value.message and "--pipeline" in flag.value.message
    with pytest.raises(ConfigError) as env:
        Pipeline.parse(None, environ={ENV: bad})
    assert ENV in env.value.message and repr(bad) in env.value.message
    assert "starting with a letter" in env.value.message and "e.g. billing" in (env.value.fix or "")


@given(NAMES, NAMES)
def test_two_pipelines_never_share_a_name_postgres_connect_or_kafka_keeps_apart(a, b):
    first, second = Pipeline(a), Pipeline(b)
    if first.name == second.name:
        return
    for attribute in ("schema", "table", "slot", "publication", "connector", "topic_prefix", "retention_lock"):
        assert getattr(first, attribute) != getattr(second, attribute), attribute


@given(NAMES)
def test_every_derived_name_is_a_legal_postgres_identifier_and_slot_name(name):
    p = Pipeline(name)
    for identifier in (p.schema, p.slot, p.publication):
        assert len(identifier.encode()) <= 63 and identifier == identifier.lower()
        assert all(c.isalnum() or c == "_" for c in identifier)


def test_sql_written_for_the_default_schema_names_the_pipelines_schema():
    p = Pipeline("billing")
    assert p.sql("SELECT FROM {schema}.outbox WHERE n = '{schema}' AND pub = '{publication}'") == (
        "SELECT FROM postbox_billing.outbox WHERE n = 'postbox_billing' AND pub = 'postbox_billing_outbox'")
    assert p.sql("x ~ '[0-9]{8}'") == "x ~ '[0-9]{8}'"  # other braces are left alone


def test_the_default_pipeline_renders_the_template_unchanged():
    template = ConnectorFile.load(CONNECTOR_TEMPLATE)
    rendered = render_connector(template, Pipeline(DEFAULT_PIPELINE))
    assert (rendered.name, rendered.config) == (template.name, template.config)


def test_a_named_pipelines_connector_reads_its_own_slot_publication_table_and_database():
    template = ConnectorFile.load(CONNECTOR_TEMPLATE)
    rendered = render_connector(template, Pipeline("billing"), database="billing_db")
    config = rendered.config
    assert rendered.name == "postbox-billing-outbox"
    assert config["slot.name"] == config["publication.name"] == "postbox_billing_outbox"
    assert config["table.include.list"] == "postbox_billing.outbox"
    assert config["topic.prefix"] == "postbox_billing"
    assert config["predicates.isOutboxTable.pattern"] == r"postbox_billing\.postbox_billing\.outbox"
    assert config["database.dbname"] == "billing_db"
    # the wire contract is shared: every pipeline routes to outbox.event.<aggregate_type>
    assert config["transforms.outbox.route.topic.replacement"] == template.config["transforms.outbox.route.topic.replacement"]
    changed = {k for k in config if config[k] != template.config.get(k)}
    assert changed == {"slot.name", "publication.name", "table.include.list", "topic.prefix",
                       "predicates.isOutboxTable.pattern", "database.dbname"}
    json.dumps(config)  # still what Connect's REST API takes
