"""A stack process that exits during start is reported with the cause from its own log.

The fault suite and CI start nodes in temporary folders that are gone by the time anyone reads
the failure, so the error message must carry the log's error lines, from the latest start only.
"""

from __future__ import annotations

import sys
from pathlib import Path

from postbox.stack.processes import ManagedProcess, wait_until


def _process(tmp_path: Path) -> ManagedProcess:
    return ManagedProcess("kafka-1", tmp_path / "kafka-1.pid", tmp_path / "kafka-1.log", marker="exit-reason-probe")


def test_a_start_that_exits_names_the_error_line_of_that_start(tmp_path):
    process = _process(tmp_path)
    process.logfile.write_text("==== postbox: starting kafka-1 at 2026-01-01 00:00:00\n[2026-01-01] ERROR an old failure of an earlier start\n")
    script = ("import sys; print('[main] INFO starting'); "
              "print('[main] ERROR Exiting Kafka due to fatal exception: Address already in use'); "
              "print('[main] INFO shut down'); sys.exit(1)  # exit-reason-probe")
    process.start([sys.executable, "-c", script])
    wait_until(lambda: not process.running(), 10, interval=0.05)

    reason = process.exit_reason()

    assert str(process.logfile) in reason
    assert "Address already in use" in reason
    assert "old failure" not in reason


def test_without_error_lines_the_last_lines_are_the_reason(tmp_path):
    process = _process(tmp_path)
    process.start([sys.executable, "-c", "print('line one'); print('the last words')  # exit-reason-probe"])
    wait_until(lambda: not process.running(), 10, interval=0.05)

    assert process.exit_reason().endswith("line one | the last words")


def test_a_missing_log_gives_just_its_path(tmp_path):
    process = _process(tmp_path)

    assert process.exit_reason() == f" (log: {process.logfile})"
