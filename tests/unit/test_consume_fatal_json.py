"""With ``--log-format json`` (or ``POSTBOX_LOG_FORMAT=json``) every stderr line of `postbox consume`
is JSON, the error that ends it at start-up included: a configuration error (exit 1, its fix as a
field), a usage error (exit 2) and an app that raises at import (exit 1, its traceback as ``exc``).
They were plain text between JSON lines, which a log collector cannot parse. The text format is
unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from postbox.cli.fatal_lines import json_requested

ROOT = Path(__file__).resolve().parents[2]


def _consume(*args: str, env: dict[str, str] | None = None) -> tuple[int, list[str]]:
    environ = {k: v for k, v in os.environ.items() if k != "POSTBOX_LOG_FORMAT"}
    done = subprocess.run([sys.executable, "-m", "postbox", "consume", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**environ, **(env or {})}, timeout=60)  # fmt: skip
    return done.returncode, done.stderr.splitlines()


def _only_json(lines: list[str]) -> dict:
    assert lines, "nothing on stderr"
    records = [json.loads(line) for line in lines]  # every line parses
    (record,) = records
    assert record["level"] == "error" and record["logger"] == "postbox" and record["ts"]
    return record


def test_a_configuration_error_is_one_json_line_with_its_fix():
    code, lines = _consume("tests.apps.counting:app", "--group", "g", "--topics", "t", "--batch-wait-ms", "-3", "--log-format", "json")
    record = _only_json(lines)
    assert code == 1 and record["exit_code"] == 1
    assert "POSTBOX_BATCH_WAIT_MS" in record["msg"] or "--batch-wait-ms" in record["msg"]
    assert "--batch-wait-ms" in record["fix"]


def test_the_variable_asks_for_json_too_and_a_usage_error_is_json():
    code, lines = _consume("tests.apps.counting:app", "--batch-size", "many", env={"POSTBOX_LOG_FORMAT": "json"})
    record = _only_json(lines)
    assert code == 2 and record["exit_code"] == 2 and "--batch-size" in record["msg"]


def test_an_app_that_raises_at_import_is_json_with_its_traceback():
    code, lines = _consume("tests.apps.broken_import:app", "--log-format=json")
    record = _only_json(lines)
    assert code == 1 and "payments client misconfigured at import" in record["msg"]
    assert "Traceback" in record["exc"] and "broken_import.py" in record["exc"]


def test_text_format_errors_stay_for_a_person():
    code, lines = _consume("tests.apps.counting:app", "--group", "g", "--topics", "t", "--batch-wait-ms", "-3")
    assert code == 1 and lines[0].startswith("error: ") and lines[1].lstrip().startswith("fix: ")


@pytest.mark.parametrize(("argv", "environ", "expected"), [
    (["consume", "a:b", "--log-format", "json"], {}, True),
    (["consume", "a:b", "--log-format=JSON"], {}, True),
    (["consume", "a:b"], {"POSTBOX_LOG_FORMAT": "json"}, True),
    (["consume", "a:b", "--log-format", "text"], {"POSTBOX_LOG_FORMAT": "json"}, False),  # the flag wins
    (["--log-format", "json"], {}, False),  # no command
    (["topics", "--log-format", "json"], {"POSTBOX_LOG_FORMAT": "json"}, False),  # not a command with JSON logs
    (["consume", "a:b", "--log-format"], {}, False),
])  # fmt: skip
def test_json_requested(argv, environ, expected):
    assert json_requested(argv, environ) is expected
