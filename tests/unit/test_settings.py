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
    assert settings.redis_url == "redis://127.0.0.1:16379/0"


def test_the_local_stack_s_addresses_are_handed_in_and_the_environment_wins_over_them():
    """#15.2: Settings never reads the stack's state folder; the CLI hands its variables in as
    ``local``. They fill what the environment leaves unset, and say so in ``sources``."""
    local = {"POSTBOX_DATABASE_URL": "postgresql://postbox_app:generated@127.0.0.1:17432/postbox",
             "POSTBOX_REDIS_URL": "redis://postbox_consumer:pw@127.0.0.1:17479/0"}
    settings = Settings.load({"POSTBOX_REDIS_URL": "redis://cache:6380/2"}, local=local)
    assert settings.database_url == local["POSTBOX_DATABASE_URL"] and settings.sources["database_url"] == "local stack"
    assert settings.redis_url == "redis://cache:6380/2" and settings.sources["redis_url"] == "POSTBOX_REDIS_URL"
    assert Settings.load({}).database_url == "postgresql://postbox_app@127.0.0.1:5432/postbox"


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
