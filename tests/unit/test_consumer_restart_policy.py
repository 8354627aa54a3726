"""`postbox consume --workers N`: when the supervisor restarts a worker that exited, and when it gives
up with the worker's exit code instead of restarting it for ever."""

from __future__ import annotations

import signal

from hypothesis import given
from hypothesis import strategies as st

from postbox.consumer.backoff import Backoff
from postbox.consumer.restart_policy import Action, RestartPolicy, decide, describe_exit, exit_code_of

POLICY = RestartPolicy(min_uptime_s=10.0, max_failed_starts=3, backoff=Backoff(base_s=0.5, max_s=30.0))
SIGKILLED = -signal.SIGKILL


def test_a_configuration_or_engine_error_exit_3_is_never_restarted_and_stops_the_supervisor_with_code_3():
    for uptime in (0.5, 3600.0):  # at start or after an hour of work: the same error comes back
        verdict = decide(POLICY, 3, uptime, 0)
        assert verdict.action is Action.GIVE_UP
        assert verdict.exit_code == 3
        assert "configuration error" in verdict.reason


def test_a_usage_error_exit_2_is_never_restarted():
    verdict = decide(POLICY, 2, 1.0, 0)
    assert (verdict.action, verdict.exit_code) == (Action.GIVE_UP, 2)


def test_a_worker_sigkilled_after_running_a_while_is_restarted_after_the_first_backoff_step():
    verdict = decide(POLICY, SIGKILLED, 120.0, 0)
    assert verdict.action is Action.RESTART
    assert verdict.delay_s == 0.5
    assert verdict.failed_starts == 0
    assert "SIGKILL" in verdict.reason


def test_a_worker_failing_at_start_is_restarted_with_a_growing_delay_then_given_up_on_with_its_exit_code():
    failed, delays = 0, []
    for _ in range(POLICY.max_failed_starts - 1):
        verdict = decide(POLICY, 1, 2.0, failed)
        assert verdict.action is Action.RESTART
        failed = verdict.failed_starts
        delays.append(verdict.delay_s)
    assert delays == [0.5, 1.0]
    verdict = decide(POLICY, 1, 2.0, failed)
    assert verdict.action is Action.GIVE_UP
    assert verdict.exit_code == 1
    assert "3 times in a row" in verdict.reason


def test_a_run_that_lasted_resets_the_failed_starts():
    assert decide(POLICY, 1, 2.0, 2).action is Action.GIVE_UP
    verdict = decide(POLICY, 1, 60.0, 2)
    assert (verdict.action, verdict.failed_starts, verdict.delay_s) == (Action.RESTART, 0, 0.5)


def test_a_worker_stopped_behind_the_supervisors_back_is_restarted_at_once_unless_it_keeps_stopping_at_start():
    assert (decide(POLICY, 0, 300.0, 0).action, decide(POLICY, 0, 300.0, 0).delay_s) == (Action.RESTART, 0.0)
    verdict = decide(POLICY, 0, 1.0, 2)
    assert verdict.action is Action.GIVE_UP
    assert verdict.exit_code == 1  # a supervisor giving up never reports success


def test_a_worker_killed_by_a_signal_at_every_start_gives_up_with_the_shells_code():
    verdict = decide(POLICY, SIGKILLED, 1.0, 2)
    assert (verdict.action, verdict.exit_code) == (Action.GIVE_UP, 137)


def test_exit_descriptions_and_codes_read_as_a_shell_reports_them():
    assert exit_code_of(SIGKILLED) == 137 and exit_code_of(3) == 3
    assert describe_exit(SIGKILLED) == "killed by SIGKILL"
    assert describe_exit(1) == "exit code 1"


@given(returncode=st.integers(-64, 255), uptime=st.floats(0, 1e6), failed=st.integers(0, 50))
def test_every_verdict_is_bounded_and_never_restarts_what_cannot_start(returncode, uptime, failed):
    verdict = decide(POLICY, returncode, uptime, failed)
    if returncode in (2, 3):
        assert verdict.action is Action.GIVE_UP and verdict.exit_code == returncode
    elif uptime < POLICY.min_uptime_s and failed + 1 >= POLICY.max_failed_starts:
        assert verdict.action is Action.GIVE_UP and verdict.exit_code != 0
    else:
        assert verdict.action is Action.RESTART
        assert 0 <= verdict.delay_s <= POLICY.backoff.max_s
        assert verdict.failed_starts == (failed + 1 if uptime < POLICY.min_uptime_s else 0)
