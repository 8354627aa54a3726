"""`postbox schemas list | cat`: piped, the listing is plain TSV with every fingerprint whole (the
table cut it to the width of an 80-column pipe), so it can be pasted into the next command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _schemas_list(*args: str) -> str:
    env = {**os.environ, "COLUMNS": "40"}  # a narrow terminal width must not matter to a pipe
    done = subprocess.run([sys.executable, "-m", "postbox", "schemas", "list", "--dir", str(ROOT / "schemas"), *args],
                          capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_piped_output_is_tsv_with_whole_fingerprints():
    expected = {(s["aggregate_type"], s["event_type"], s["version"]): s["fingerprint"] for s in json.loads(_schemas_list("--json"))}
    lines = _schemas_list().splitlines()
    assert lines[0].split("\t") == ["aggregate", "event type", "version", "fingerprint", "fields"]
    found = {}
    for line in lines[1:]:
        aggregate, event_type, version, fingerprint, _fields = line.split("\t")
        found[(aggregate, event_type, int(version.split()[0].lstrip("v")))] = fingerprint
    assert found == expected and all(len(f) == 16 for f in found.values())
