"""Backoff, DLQ headers, error codes and created_at parsing (pure functions of the runtime)."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from postbox.consumer import Backoff, Failure, dlq_headers, dlq_topic
from postbox.consumer.deadletter import DLQ_HEADERS, one_line
from postbox.consumer.runtime import _error_code, parse_created_at


def test_backoff_grows_exponentially_with_jitter_and_a_cap():
    backoff = Backoff(0.1, 2.0, rng=random.Random(7))
    assert [backoff.ceiling(n) for n in range(1, 7)] == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0]
    assert backoff.ceiling(10_000) == 2.0  # no overflow
    for attempt in range(1, 12):
        delays = {backoff.delay(attempt) for _ in range(50)}
        top = backoff.ceiling(attempt)
        assert all(top / 2 <= d <= top for d in delays)
        assert len(delays) > 1  # jittered
    with pytest.raises(ValueError):
        Backoff(0, 1)
    with pytest.raises(ValueError):
        Backoff(2, 1)


def test_dlq_headers_keep_the_originals_and_add_the_contract():
    original = [("id", b"e1"), ("event_type", b"X"), ("postbox.error", b"old"), ("traceparent", None)]
    when = datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)
    failure = Failure("HandlerError:ValueError", "bad\nthing   happened", attempts=3)
    headers = dlq_headers(original, failure, topic="outbox.event.order", partition=2, offset=41, group="g", failed_at=when)
    names = [k for k, _ in headers]
    assert names[:3] == ["id", "event_type", "traceparent"]  # originals first, ours replaced
    assert names[3:] == list(DLQ_HEADERS)
    d = dict(headers)
    assert d["postbox.error"] == b"bad thing happened"
    assert d["postbox.error.class"] == b"HandlerError:ValueError"
    assert d["postbox.error.kind"] == b"permanent"
    assert (d["postbox.origin.topic"], d["postbox.origin.partition"], d["postbox.origin.offset"]) == (b"outbox.event.order", b"2", b"41")
    assert d["postbox.attempts"] == b"3" and d["postbox.group"] == b"g"
    assert d["postbox.failed_at"] == b"2024-01-02T03:04:05.678Z"
    assert dlq_topic("outbox.event.order") == "outbox.event.order.dlq"
    assert len(one_line("x" * 5000)) == 2000


@pytest.mark.parametrize(
    ("error", "code"),
    [("WRONGTYPE Operation against a key holding the wrong kind of value", "WRONGTYPE"),
     ("ERR value is not an integer or out of range", "ERR"), ("user function said no", "ERR"), (None, "ERR"),
     ("NOT_ALLOWED: x", "NOT_ALLOWED")],
)
def test_effect_error_codes(error, code):
    assert _error_code(error) == code


def test_created_at_parsing():
    expected = datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=timezone.utc)
    assert parse_created_at("2024-05-06T07:08:09.123Z") == expected
    assert parse_created_at("2024-05-06T09:08:09.123+02:00") == expected
    assert parse_created_at("2024-05-06T07:08:09.123") == expected
    assert parse_created_at("1714979289123") == expected  # epoch millis
    assert parse_created_at("1714979289123000") == expected  # epoch micros
    assert parse_created_at("yesterday") is None and parse_created_at(None) is None
    # a date with a UTC designator: midnight UTC (3.11's fromisoformat alone refuses it; #14.2
    # parses the common form directly and must still read this one)
    assert parse_created_at("2024-05-06Z") == datetime(2024, 5, 6, tzinfo=timezone.utc)


@settings(max_examples=300, deadline=None)
@given(st.datetimes(timezones=st.just(timezone.utc)), st.sampled_from(["auto", "milliseconds", "microseconds", "seconds"]))
def test_created_at_reads_every_iso_form_debezium_or_the_writer_sends(when: datetime, timespec: str):
    """#14.2: ``Z``, ``+00:00`` and an offset read as the same instant, at every precision."""
    text = when.isoformat(timespec=timespec)
    expected = datetime.fromisoformat(text)
    assert parse_created_at(text) == expected
    assert parse_created_at(text.replace("+00:00", "Z")) == expected
    assert parse_created_at(expected.astimezone(timezone(timedelta(hours=-7))).isoformat(timespec=timespec)) == expected


_CREATED_TEXTS = st.one_of(
    st.datetimes().map(lambda when: when.isoformat()),
    st.datetimes(timezones=st.just(timezone.utc)).map(lambda when: when.isoformat().replace("+00:00", "Z")),
    st.integers(-(10**20), 10**20).map(str),
    st.text(alphabet="0123456789-+:.TZ tz\t\n", max_size=32),
    st.text(max_size=32),
    st.sampled_from(["2024-05-06Z", "20240506", " 2024-05-06T07:08:09Z", "2024-05-06T07:08:09Z\n", "-1", "--5", "99999-01-01T00:00:00Z"]),
)


@settings(max_examples=500, deadline=None)
@given(_CREATED_TEXTS)
def test_created_at_fast_path_reads_what_the_general_path_reads(text: str):
    """The ISO-8601 fast path (one fromisoformat call for the router's text) gives, for any text,
    what the general path (stripping, epoch digits, ``Z`` anywhere) gives: the same instant, or
    None for text neither reads."""
    from postbox.consumer.decoding import _parse_any_created_at

    assert parse_created_at(text) == _parse_any_created_at(text)
