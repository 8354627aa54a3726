"""ConsumerConfig: flags over POSTBOX_* over app defaults; clear errors naming the setting."""

from __future__ import annotations

from datetime import timedelta

import pytest

from postbox.consumer import App, ConsumerConfig
from postbox.consumer.config import parse_bool, parse_duration
from postbox.errors import ConfigError
from postbox.settings import Settings

SETTINGS = Settings()


def load(env=None, app=None, **flags):
    return ConsumerConfig.load(env or {}, app=app, settings=SETTINGS, **flags)


def make_app(name="billing") -> App:
    app = App(name)
    app.add("order", "OrderPlaced", lambda e, fx: None)
    app.add("payment", "*", lambda e, fx: None)
    return app


def test_defaults_come_from_the_app():
    config = load(app=make_app())
    assert config.group == "billing"
    assert config.topics == ("outbox.event.order", "outbox.event.payment")
    assert config.batch_size == 500 and config.handler_retries == 2
    assert config.marker_ttl == timedelta(days=8)
    assert config.require_durable is True
    assert config.source("group") == "app" and config.source("batch_size") == "default"


def test_env_and_flags_with_the_same_names_and_flags_win():
    env = {"POSTBOX_GROUP": "g-env", "POSTBOX_TOPICS": "a, b,a", "POSTBOX_BATCH_SIZE": "64", "POSTBOX_MARKER_TTL": "36h",
           "POSTBOX_REQUIRE_DURABLE": "false", "POSTBOX_LOG_FORMAT": "JSON"}
    config = load(env, app=make_app(), batch_size=32)
    assert config.group == "g-env" and config.source("group") == "POSTBOX_GROUP"
    assert config.topics == ("a", "b")
    assert config.batch_size == 32 and config.source("batch_size") == "--batch-size"
    assert config.marker_ttl == timedelta(hours=36)
    assert config.require_durable is False
    assert config.log_format == "json"


@pytest.mark.parametrize(
    ("env", "flags", "needle"),
    [
        ({"POSTBOX_BATCH_SIZE": "lots"}, {}, "POSTBOX_BATCH_SIZE='lots'"),
        ({}, {"batch_size": 0}, "--batch-size=0"),
        ({"POSTBOX_BACKOFF_BASE_MS": "500", "POSTBOX_BACKOFF_MAX_MS": "100"}, {}, "POSTBOX_BACKOFF_MAX_MS=100"),
        ({"POSTBOX_LOG_FORMAT": "xml"}, {}, "text or json"),
        ({"POSTBOX_MARKER_TTL": "soon"}, {}, "a duration"),
        ({"POSTBOX_MARKER_TTL": "10s"}, {}, "at least a minute"),
        ({"POSTBOX_REQUIRE_DURABLE": "maybe"}, {}, "true or false"),
        ({"POSTBOX_TOPICS": "good,bad topic"}, {}, "topic names"),
        ({"POSTBOX_TOPICS": "outbox.event.order.dlq"}, {}, "dead-letter"),
        ({"POSTBOX_AUTO_OFFSET_RESET": "middle"}, {}, "earliest or latest"),
        ({"POSTBOX_METRICS_PORT": "70000"}, {}, "0 to 65535"),
        ({"POSTBOX_SCHEMAS_DIR": "/nonexistent/schemas"}, {}, "existing folder"),
    ],
)
def test_bad_values_name_their_source(env, flags, needle):
    with pytest.raises(ConfigError) as info:
        load({"POSTBOX_GROUP": "g", "POSTBOX_TOPICS": "t", **env}, **flags)
    assert needle in str(info.value)
    assert info.value.fix


def test_missing_group_and_topics_say_how_to_set_them():
    with pytest.raises(ConfigError, match="no consumer group"):
        load({"POSTBOX_TOPICS": "t"})
    catch_all_only = App("g")
    catch_all_only.catch_all(lambda e, fx: None)
    with pytest.raises(ConfigError, match="no topics"):
        load(app=catch_all_only)


def test_endpoints_come_from_settings_and_flags():
    config = ConsumerConfig.load({"POSTBOX_GROUP": "g", "POSTBOX_TOPICS": "t", "POSTBOX_REDIS_URL": "redis://h:1/0"},
                                 kafka_bootstrap="k:9")
    assert config.redis_url == "redis://h:1/0" and config.kafka_bootstrap == "k:9"
    with pytest.raises(ConfigError, match="POSTBOX_REDIS_URL"):
        ConsumerConfig.load({"POSTBOX_GROUP": "g", "POSTBOX_TOPICS": "t", "POSTBOX_REDIS_URL": "http://x"})


def test_unknown_setting_is_a_programming_error():
    with pytest.raises(TypeError, match="batchsize"):
        load({"POSTBOX_GROUP": "g", "POSTBOX_TOPICS": "t"}, batchsize=3)


def test_durations_and_booleans():
    assert parse_duration("691200") == timedelta(days=8)
    assert parse_duration("90m") == timedelta(minutes=90)
    assert parse_duration("500ms") == timedelta(milliseconds=500)
    assert parse_duration(30) == timedelta(seconds=30)
    with pytest.raises(ValueError):
        parse_duration("8 days")
    assert parse_bool("Yes") is True and parse_bool("0") is False


def test_legacy_marker_transition_is_on_by_default_and_reaches_the_engine():
    """#12.1 upgrade: POSTBOX_LEGACY_MARKERS (default true) is the runtime engine's legacy_markers."""
    from postbox.consumer.runtime import ConsumerRuntime

    assert load(app=make_app()).legacy_markers is True
    config = load({"POSTBOX_LEGACY_MARKERS": "false"}, app=make_app())
    assert config.legacy_markers is False
    assert ConsumerRuntime(make_app(), config, install_signals=False).engine.legacy_markers is False  # no connection made
    with pytest.raises(ConfigError, match="POSTBOX_LEGACY_MARKERS"):
        load({"POSTBOX_LEGACY_MARKERS": "sometimes"}, app=make_app())


def test_redis_replicas_follow_the_topology_by_default_and_reach_the_engine():
    """POSTBOX_REDIS_REPLICAS / --redis-replicas: ``auto`` (default) or a number, handed to the
    runtime's engine; anything else names the variable and what it takes."""
    from postbox.consumer.runtime import ConsumerRuntime

    assert load(app=make_app()).redis_replicas == "auto"
    assert load({"POSTBOX_REDIS_REPLICAS": " 2 "}, app=make_app()).redis_replicas == 2
    assert load({"POSTBOX_REDIS_REPLICAS": "2"}, app=make_app(), redis_replicas="AUTO").redis_replicas == "auto"
    config = load({"POSTBOX_REDIS_REPLICAS": "0"}, app=make_app())
    assert ConsumerRuntime(make_app(), config, install_signals=False).engine.replicas == 0  # no connection made
    for bad in ("one", "-1", "99"):
        with pytest.raises(ConfigError, match="POSTBOX_REDIS_REPLICAS") as info:
            load({"POSTBOX_REDIS_REPLICAS": bad}, app=make_app())
        assert "auto or a number of replicas" in str(info.value) and "--redis-replicas" in (info.value.fix or "")
