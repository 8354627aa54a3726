"""The supervisor of `postbox consume --workers N` on real child processes (small Python scripts
that stand in for `postbox consume`: they record each start, and stop cleanly on SIGTERM)."""

from __future__ import annotations

import os

import pytest
import signal
import sys
import textwrap
import threading
import time
from pathlib import Path

from postbox.consumer.backoff import Backoff
from postbox.consumer.restart_policy import RestartPolicy
from postbox.consumer.supervisor import Supervisor

WORKER = textwrap.dedent("""
    import os, signal, sys, time, pathlib
    folder, index, mode = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    run = len(list(folder.glob(f"started-{index}-*")))
    (folder / f"started-{index}-{run}").write_text(str(os.getpid()))
    if mode.startswith("exit"):
        sys.exit(int(mode[4:]))
    if mode == "starting":  # still importing: no handler yet, a signal ends it the default way
        while True:
            time.sleep(0.02)
    if mode == "deaf":  # a worker that does not stop on SIGTERM
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            time.sleep(0.02)
    def stop(signum, frame):
        (folder / f"stopped-{index}-{run}").write_text(signal.Signals(signum).name)
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        time.sleep(0.02)
""")
pytestmark = pytest.mark.timeout(60)  # a supervisor that never stops its workers would wait for ever
FAST = RestartPolicy(min_uptime_s=5.0, max_failed_starts=3, backoff=Backoff(base_s=0.05, max_s=0.2))


def _supervisor(folder: Path, modes: list[str], policy: RestartPolicy = FAST) -> Supervisor:
    return Supervisor(len(modes), lambda i: [sys.executable, "-c", WORKER, str(folder), str(i), modes[i]],
                      lambda i: dict(os.environ), policy)  # fmt: skip


def _wait(path: Path, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists() or not path.read_text():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path.name} never appeared")
        time.sleep(0.02)
    return path.read_text()


def _in_background(action) -> threading.Thread:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            action()
        except BaseException as exc:  # noqa: BLE001 - reported by the test through the supervisor's end
            errors.append(exc)
            os.kill(os.getpid(), signal.SIGTERM)  # end the supervisor so the test sees the failure

    thread = threading.Thread(target=run, daemon=True)
    thread.errors = errors  # type: ignore[attr-defined]
    thread.start()
    return thread


def test_a_sigkilled_worker_is_restarted_and_a_sigterm_to_the_supervisor_stops_every_worker_cleanly(tmp_path):
    def scenario() -> None:
        os.kill(int(_wait(tmp_path / "started-0-0")), signal.SIGKILL)
        _wait(tmp_path / "started-0-1")  # the restart
        _wait(tmp_path / "started-1-0")
        os.kill(os.getpid(), signal.SIGTERM)  # to the supervisor (this process)

    helper = _in_background(scenario)
    code = _supervisor(tmp_path, ["run", "run"]).run()
    helper.join(5)
    assert not helper.errors, helper.errors  # type: ignore[attr-defined]
    assert code == 0
    assert (tmp_path / "stopped-0-1").read_text() == "SIGTERM"  # the restarted worker got the signal ...
    assert (tmp_path / "stopped-1-0").read_text() == "SIGTERM"  # ... and so did the other one
    assert not (tmp_path / "started-0-2").exists() and not (tmp_path / "started-1-1").exists()


def test_a_worker_exiting_3_is_not_restarted_the_others_are_stopped_cleanly_and_the_supervisor_exits_3(tmp_path):
    code = _supervisor(tmp_path, ["run", "exit3"]).run()
    assert code == 3
    assert not (tmp_path / "started-1-1").exists()  # never restarted
    assert (tmp_path / "stopped-0-0").read_text() == "SIGTERM"  # the healthy worker was stopped, not killed


def test_a_worker_that_fails_at_every_start_is_given_up_on_after_the_policys_attempts_with_its_exit_code(tmp_path):
    code = _supervisor(tmp_path, ["run", "exit1"]).run()
    assert code == 1
    assert sorted(p.name for p in tmp_path.glob("started-1-*")) == ["started-1-0", "started-1-1", "started-1-2"]
    assert (tmp_path / "stopped-0-0").read_text() == "SIGTERM"


def test_sigint_to_the_supervisor_is_forwarded_to_every_worker_as_sigint(tmp_path):
    def scenario() -> None:
        _wait(tmp_path / "started-0-0")
        _wait(tmp_path / "started-1-0")
        os.kill(os.getpid(), signal.SIGINT)

    helper = _in_background(scenario)
    code = _supervisor(tmp_path, ["run", "run"]).run()
    helper.join(5)
    assert code == 0
    assert [(tmp_path / f"stopped-{i}-0").read_text() for i in range(2)] == ["SIGINT", "SIGINT"]


def test_a_worker_stopped_by_the_forwarded_signal_before_its_handler_counts_as_a_clean_stop(tmp_path):
    """A worker SIGTERMed while it is still starting (a restart in progress when the deploy stops
    the pod) dies of the signal before it consumed anything: nothing to commit, a clean stop, so
    the supervisor exits 0 (it exited 143, read as a failure by the orchestrator)."""

    def scenario() -> None:
        _wait(tmp_path / "started-0-0")
        _wait(tmp_path / "started-1-0")
        os.kill(os.getpid(), signal.SIGTERM)

    helper = _in_background(scenario)
    code = _supervisor(tmp_path, ["run", "starting"]).run()
    helper.join(5)
    assert code == 0
    assert (tmp_path / "stopped-0-0").read_text() == "SIGTERM"


def test_a_worker_killed_by_another_signal_while_stopping_is_still_a_failure(tmp_path):
    def scenario() -> None:
        _wait(tmp_path / "started-1-0")
        pid = int(_wait(tmp_path / "started-0-0"))
        os.kill(os.getpid(), signal.SIGTERM)  # forwarded; the deaf worker stays ...
        time.sleep(0.5)
        os.kill(pid, signal.SIGKILL)  # ... until it is killed outright: not a clean stop

    helper = _in_background(scenario)
    code = _supervisor(tmp_path, ["deaf", "run"]).run()
    helper.join(5)
    assert code == 128 + signal.SIGKILL
