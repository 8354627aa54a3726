"""Durations as people type them (``500ms``, ``90s``, ``15m``, ``2h``, ``8d``, ``1w``; a bare number
is seconds): one parser for every flag and environment variable that takes a duration."""

from __future__ import annotations

import re
from datetime import timedelta

_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*\Z")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, None: 1}


def parse_duration(text: str, what: str = "duration") -> timedelta:
    """Parse `text`; ValueError naming `what` and the text when it is not a duration."""
    match = _DURATION.match((text or "").lower())
    if not match:
        raise ValueError(f"{what} {text!r} is not a duration like 90s, 15m, 2h, 8d")
    try:
        return timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])
    except OverflowError:  # past timedelta's 999,999,999 days: still the user's typing, not a crash
        raise ValueError(f"{what} {text!r} is longer than any duration this can hold (at most about 2.7 million years)") from None
