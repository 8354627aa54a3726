"""Passwords given as parameters (``?password=`` for redis-py and libpq, libpq's ``sslpassword``,
a key=value DSN's ``password=``) are hidden like the URL's own password in everything printed or
logged: they survived redact_url, so the consumer's start-up line, Settings' repr and every
"Redis at ..." error showed them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from postbox.consumer.config import ConsumerConfig
from postbox.settings import Settings, redact_url

SECRET = "s3cr3t-Pa55"


@pytest.mark.parametrize("url", [
    f"redis://app@127.0.0.1:6379/0?password={SECRET}",
    f"rediss://127.0.0.1:6380/0?ssl_cert_reqs=required&password={SECRET}&socket_timeout=5",
    f"postgresql://app@db.internal/shop?sslmode=require&password={SECRET}",
    f"postgresql://app@db.internal/shop?sslpassword={SECRET}",
    f"postgresql://app:{SECRET}@db.internal/shop?password={SECRET}",
    f"host=db.internal dbname=shop user=app password={SECRET}",
    f"host=db.internal password='{SECRET} with spaces' dbname=shop",
    f"host=db.internal password = {SECRET}",
])  # fmt: skip
def test_a_password_parameter_is_hidden(url):
    shown = redact_url(url)
    assert SECRET not in shown and "***" in shown


def test_the_rest_of_the_url_is_kept():
    assert redact_url(f"redis://h:6379/0?socket_timeout=5&password={SECRET}&db=0") == "redis://h:6379/0?socket_timeout=5&password=***&db=0"
    assert redact_url("redis://h:6379/0?socket_timeout=5") == "redis://h:6379/0?socket_timeout=5"
    assert redact_url("host=db dbname=shop") == "host=db dbname=shop"


@given(st.text(alphabet=st.characters(blacklist_characters="&#' \\"), min_size=4))
def test_any_password_value_is_hidden(password):
    assert f"password={password}" not in redact_url(f"redis://h:6379/0?a=1&password={password}")


def test_settings_repr_and_the_consumers_start_line_hide_it():
    url = f"redis://app@127.0.0.1:6379/0?password={SECRET}"
    assert SECRET not in repr(Settings(redis_url=url))
    config = ConsumerConfig.load({}, group="g", topics="t", redis_url=url)
    assert SECRET not in str(config.describe())
