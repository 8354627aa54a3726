"""Every benchmark exits non-zero when it counted fewer events than it sent (bench/counting.py).

The end-to-end bench once printed throughput 0 and p99 None for every path while exiting 0: its
observation hooks were no longer called. A short count must fail the run, naming what fell short;
a full one (or more, e.g. duplicates counted apart) passes. Shown to fail with ``short`` as
``counted <= sent`` (a full count then failed the run)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("bench_counting", ROOT / "bench" / "counting.py")
counting = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
sys.modules["bench_counting"] = counting  # dataclasses look their module up there
spec.loader.exec_module(counting)  # type: ignore[union-attr]


def test_a_short_count_exits_1_and_names_what_fell_short(capsys) -> None:
    tallies = [counting.Tally("e2e cdc path", 60_000, 60_000), counting.Tally("e2e polling paths", 60_000, 0)]
    with pytest.raises(SystemExit) as exit_info:
        counting.require_full_counts(tallies)
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert "e2e polling paths: counted 0 of 60,000 events sent (60,000 missing)" in err
    assert "cdc" not in err


@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)), max_size=5))
def test_only_the_tallies_counted_short_are_reported(pairs: list[tuple[int, int]]) -> None:
    tallies = [counting.Tally(f"t{i}", sent, counted) for i, (sent, counted) in enumerate(pairs)]
    short = counting.shortfalls(tallies)
    assert [line.split(":")[0] for line in short] == [t.what for t in tallies if t.counted < t.sent]
    if not short:
        counting.require_full_counts(tallies)  # returns: every count is full
