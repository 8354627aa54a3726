"""#14.2: the codec converts ``timestamp-millis``/``-micros`` fields with ``datetime.fromtimestamp``
(a third of fastavro's ``epoch + timedelta`` cost, on most events) only where a double holds the
instant exactly enough; it must give exactly fastavro's datetime (value, tzinfo) for EVERY long,
and where fastavro raises (a year beyond 9999) the record must fail as it did. Properties over the
whole long range and around the bound and the epoch. Shown to fail (scratch edits): with the bound
at 2**37 s instead of 2**32 s (a millisecond read 7 µs off in the year 6325), and with
``value // 1000``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable

import pytest
from fastavro.read import LOGICAL_READERS
from hypothesis import example, given, settings
from hypothesis import strategies as st

from postbox.codec.logical_fields import _EXACT_SECONDS, _timestamp_micros, _timestamp_millis

LONG = st.integers(-(2**63), 2**63 - 1)
MILLIS_EDGE = st.integers(-_EXACT_SECONDS * 1000 - 10**6, -_EXACT_SECONDS * 1000 + 10**6) | st.integers(
    _EXACT_SECONDS * 1000 - 10**6, _EXACT_SECONDS * 1000 + 10**6)
MICROS_EDGE = st.integers(-_EXACT_SECONDS * 10**6 - 10**9, -_EXACT_SECONDS * 10**6 + 10**9) | st.integers(
    _EXACT_SECONDS * 10**6 - 10**9, _EXACT_SECONDS * 10**6 + 10**9)
NEAR_EPOCH = st.integers(-(10**13), 10**13)


def _same(ours: Callable[..., Any], theirs: Callable[..., Any], value: int, kind: dict[str, str]) -> None:
    try:
        expected: Any = theirs(value, kind, None)
    except Exception as exc:  # noqa: BLE001 - what fastavro raises, ours must raise too
        with pytest.raises(type(exc)):
            ours(value, kind, None)
        return
    got = ours(value, kind, None)
    assert got == expected and got.tzinfo == expected.tzinfo and type(got) is type(expected), value


@settings(max_examples=1500, deadline=None)
@given(LONG | MILLIS_EDGE | NEAR_EPOCH)
@example(0)
@example(-1)
@example(1_764_567_123_456)
@example(_EXACT_SECONDS * 1000 - 1)
@example(-_EXACT_SECONDS * 1000 + 1)
def test_timestamp_millis_is_fastavros_reading(value: int) -> None:
    _same(_timestamp_millis, LOGICAL_READERS["long-timestamp-millis"], value, {"type": "long", "logicalType": "timestamp-millis"})


@settings(max_examples=1500, deadline=None)
@given(LONG | MICROS_EDGE | NEAR_EPOCH.map(lambda n: n * 1000 + 999))
@example(0)
@example(-1)
@example(1_764_567_123_456_789)
@example(_EXACT_SECONDS * 10**6 - 1)
@example(-_EXACT_SECONDS * 10**6 + 1)
def test_timestamp_micros_is_fastavros_reading(value: int) -> None:
    _same(_timestamp_micros, LOGICAL_READERS["long-timestamp-micros"], value, {"type": "long", "logicalType": "timestamp-micros"})


@pytest.mark.parametrize("reader, theirs, value", [
    (_timestamp_millis, "long-timestamp-millis", -1),
    (_timestamp_millis, "long-timestamp-millis", -86_400_000 * 365 * 30),
    (_timestamp_micros, "long-timestamp-micros", -1),
])
def test_a_time_before_1970_is_read_without_fromtimestamp(monkeypatch: pytest.MonkeyPatch, reader: Callable[..., Any],
                                                          theirs: str, value: int) -> None:
    """On Windows ``datetime.fromtimestamp`` of a negative time raises OSError (CPython issue 36439,
    why fastavro does not use it): a time before 1970 must take fastavro's reader on every platform.
    Simulated here; shown to fail with the fast path's lower bound at -2**32 s."""
    from postbox.codec import logical_fields

    def windows_fromtimestamp(seconds: float, tz: Any) -> Any:
        if seconds < 0:
            raise OSError(22, "Invalid argument")
        return datetime.fromtimestamp(seconds, tz)

    monkeypatch.setattr(logical_fields, "_from_timestamp", windows_fromtimestamp)
    kind = {"type": "long", "logicalType": theirs.split("-", 1)[1]}
    assert reader(value, kind, None) == LOGICAL_READERS[theirs](value, kind, None)
