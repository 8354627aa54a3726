"""A setting refused at start-up is named in the error, its password never (README: secrets stay out
of logs and output; docs/consumer.md: a bad value stops the command with a message naming the
variable). The URL settings: a wrong scheme, an unknown parameter, a bad escape; libpq key=value strings."""

from __future__ import annotations

import pytest

from postbox.errors import ConfigError
from postbox.settings import Settings


@pytest.mark.parametrize("value", [
    "postgresq://app:s3cret-pw@127.0.0.1/db",
    "postgresql://app:s3cret-pw@127.0.0.1/db?sslmode=require&bogus=1",
    "postgresql://app:s3cret%zz-pw@127.0.0.1/db",
    "user=app password=s3cret-pw hots=127.0.0.1",
    "user=app password=s3cret pw host=127.0.0.1",
    "user=app password='s3cret-pw host=127.0.0.1",
])
def test_a_refused_database_url_does_not_print_its_password(value):
    with pytest.raises(ConfigError) as info:
        Settings.load({"POSTBOX_DATABASE_URL": value})
    text = str(info.value)
    assert "POSTBOX_DATABASE_URL" in text
    assert "s3cret" not in text and "-pw" not in text, text


@pytest.mark.parametrize("value", [
    "postgresql://app:s3cret-pw@:5432/db",  # no host: libpq's default socket
    "postgresql://app:s3cret-pw@127.0.0.1:99999/db",  # libpq reads it; connecting names the port
    "user=app password=s3cret-pw host=127.0.0.1",
])
def test_a_string_libpq_reads_is_taken_and_its_password_never_shown(value):
    settings = Settings.load({"POSTBOX_DATABASE_URL": value})
    assert settings.database_url == value and "s3cret-pw" not in repr(settings)


def test_a_refused_redis_url_does_not_print_its_password():
    with pytest.raises(ConfigError) as info:
        Settings.load({"POSTBOX_REDIS_URL": "redis://user:s3cret-pw@/0"})
    assert "POSTBOX_REDIS_URL" in str(info.value) and "s3cret-pw" not in str(info.value)
