"""bench/e2e.py counts what it measures: a short CDC run on the stack exits 0 with every committed
event observed applied (through the consumer's public observer), and its JSON line says so.

Before the observer, the bench's private overrides were no longer called by the consumer: it
counted nothing, printed throughput 0, and still exited 0."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_a_short_cdc_run_exits_0_with_a_full_count() -> None:
    proc = subprocess.run(
        [sys.executable, "bench/e2e.py", "--quick", "--paths", "cdc", "--rates", "200", "--duration", "3", "--no-search",
         "--drain-timeout", "30"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    committed, applied = figures["events_committed_vs_applied"]["e2e cdc path"]
    assert committed == applied and committed >= 600  # the run's 600 events and the warm-up's
    assert figures["cdc_missing_at_200"] == 0 and figures["cdc_throughput_at_200"] > 0
