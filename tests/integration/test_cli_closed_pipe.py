"""#15 CLI polish: a command whose stdout reader went away (`postbox tail … | head -1`) exits quietly
with 141 (128 + SIGPIPE, what a shell reports for coreutils' `seq 1 1000000 | head -1`): no
traceback, no "Exception ignored" line, and never click's exit 1, which reads as "a problem was
found". The reader is gone before the command writes anything (its pipe closed at once), so the
write fails every time, not only when a race is lost."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.integration.incident_support import CLI, ROOT
from tests.support.consumers import create_topic, json_event, produce

pytestmark = pytest.mark.integration

EXIT_CLOSED_PIPE = 141


def _run_with_stdout_closed(*args: str) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    proc = subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the command starts writing
    try:
        err = proc.stderr.read().decode(errors="replace")
        return proc.wait(timeout=120), err
    finally:
        proc.stderr.close()


@pytest.fixture
def topic(settings, unique) -> str:
    name = f"outbox.event.pipe{unique}"
    create_topic(settings.kafka_bootstrap, name, 1)
    produce(settings.kafka_bootstrap, name, [json_event(f"pipe{unique}", "a1", "Counted", i) for i in range(5)])
    return name


@pytest.mark.parametrize(
    "args",
    [
        ("tail", "{topic}", "--output", "tsv"),
        ("tail", "{topic}", "--output", "json"),
        ("tail", "{topic}", "--follow", "--from", "beginning", "--idle-timeout", "5", "--output", "json"),
        ("topics", "--output", "tsv"),
        ("topics", "--output", "table"),  # rich's console meets the closed pipe
        ("--help",),  # typer's help console
    ],
    ids=["tail-tsv", "tail-json", "tail-follow", "topics-tsv", "topics-table", "help"],
)
def test_a_closed_stdout_ends_the_command_quietly(topic, args):
    code, err = _run_with_stdout_closed(*(a.format(topic=topic) for a in args))
    assert code == EXIT_CLOSED_PIPE, err
    assert "Traceback" not in err and "Exception ignored" not in err and "Broken pipe" not in err, err
