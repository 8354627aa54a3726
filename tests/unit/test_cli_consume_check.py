"""`postbox consume --check` says what a run would do, a time window included (--from/--until/-p):
before, a window run's check printed the same as a group member's, so a wrong window (a swapped
end, a mistyped partition) showed only once the run applied it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any


def _check(*args: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "postbox", "consume", "consumers.shop.payment:app", "--check", *args],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_check_shows_the_window_a_run_would_apply() -> None:
    shown = _check("--from", "2026-12-01T10:00:00Z", "--until", "2026-12-01T11:00:00Z", "-p", "2", "-p", "0", "-p", "2")
    assert shown["window"] == {
        "from": "time 2026-12-01T10:00:00.000Z",
        "until": "time 2026-12-01T11:00:00.000Z (exclusive)",
        "partitions": [0, 2],
        "commits": "never: a window run joins no group and leaves its offsets as they are",
    }


def test_check_shows_a_window_from_the_groups_offsets_on_every_partition() -> None:
    window = _check("--from", "committed", "--until", "end")["window"]
    assert (window["from"], window["until"], window["partitions"]) == ("committed", "end (exclusive)", "all")


def test_check_of_a_group_member_shows_no_window() -> None:
    assert _check()["window"] is None
