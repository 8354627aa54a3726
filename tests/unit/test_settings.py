"""Settings: environment, flags and defaults, validated with the variable's name in the error."""

from __future__ import annotations

import pytest

from postbox.errors import ConfigError
from postbox.settings import Settings, redact_url

ENV = {
    "POSTBOX_DATABASE_URL": "postgresql://app:s3cret@db.internal:6432/shop",
    "POSTBOX_KAFKA_BOOTSTRAP": "k1:9092,k2:9092",
    "POSTBOX_REDIS_URL": "redis://cache:6380/2",
    "POSTBOX_CONNECT_URL": "http://connect:8083",
}


def test_environment_is_read_and_flags_override_it():
    settings = Settings.load(ENV, kafka_bootstrap="override:9092")
    assert settings.database_url == ENV["POSTBOX_DATABASE_URL"]
    assert settings.kafka_bootstrap == "override:9092"
    assert settings.sources["kafka_bootstrap"] == "flag"
    assert settings.sources["redis_url"] == "POSTBOX_REDIS_URL"


def test_defaults_follow_moved_local_stack_ports():
    settings = Settings.load({"POSTBOX_KAFKA_PORT": "19092", "POSTBOX_REDIS_PORT": "16379", "POSTBOX_DATABASE_URL": "postgresql://a@h/db"})
    assert settings.kafka_bootstrap == "127.0.0.1:19092"
    # (with the local stack's ACL active the URL also carries the consumer user's credentials)
    assert settings.redis_url.startswith("redis://") and settings.redis_url.endswith("127.0.0.1:16379/0")


@pytest.mark.parametrize(
    ("var", "value", "expected"),
    [
        ("POSTBOX_DATABASE_URL", "mysql://x@h/db", "POSTBOX_DATABASE_URL"),
        ("POSTBOX_REDIS_URL", "redis://:6379", "names no host"),
        ("POSTBOX_KAFKA_BOOTSTRAP", "localhost", "is not host:port"),
        ("POSTBOX_KAFKA_BOOTSTRAP", "k1:9092,k2:99999", "'k2:99999'"),
        ("POSTBOX_CONNECT_URL", "http://connect:port", "not a number"),
    ],
)
def test_bad_values_name_the_variable_and_the_problem(var, value, expected):
    with pytest.raises(ConfigError) as err:
        Settings.load({**ENV, var: value})
    assert var in err.value.message
    assert expected in err.value.message


def test_passwords_never_show_in_repr():
    settings = Settings.load(ENV)
    assert "s3cret" not in repr(settings)
    assert redact_url("postgresql://app:s3cret@h/db") == "postgresql://app:***@h/db"
