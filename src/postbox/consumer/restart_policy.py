"""When the supervisor of ``postbox consume --workers N`` restarts a worker that exited, and when it
gives up: pure functions of the exit code, how long the worker ran and its failed starts so far.

Why these rules:

- exit 2 (a usage error) and exit 3 (an engine or configuration error while running: an ACL
  refusal, revoked Redis credentials, an instance id another process uses) would only happen again:
  the runtime's own advice is "fix what the message names, then restart". The supervisor stops
  the other workers and exits with that code, never restarting it;
- any other exit (a crash, a SIGKILL by the OOM killer, a configuration error only the worker can
  see such as a refused Kafka login or a port in use) is restarted after a backoff that doubles with
  each *failed start* in a row (a run shorter than ``min_uptime_s``) and is reset by a run that
  lasted. After ``max_failed_starts`` failed starts in a row the worker is taken to be unable to
  start at all: the supervisor gives up with the worker's exit code instead of looping for ever;
- exit 0 without a stop requested (someone sent the worker itself a SIGTERM) is restarted at once,
  unless it too exits straight after starting.
"""

from __future__ import annotations

import enum
import signal
from dataclasses import dataclass, field

from postbox.consumer.backoff import Backoff

#: Exit codes a restart cannot cure, and what each means (the runtime's and the CLI's codes).
FATAL_EXIT_CODES: dict[int, str] = {
    2: "a usage error",
    3: "an engine or configuration error (the worker's message above names it and the fix)",
}


class Action(enum.Enum):
    RESTART = "restart"
    GIVE_UP = "give up"


@dataclass(frozen=True)
class RestartPolicy:
    """How the supervisor treats a worker's exit (see the module docs)."""

    #: A run shorter than this is a failed start.
    min_uptime_s: float = 10.0
    #: Failed starts in a row after which the supervisor gives up.
    max_failed_starts: int = 3
    #: Delay before the n-th restart in a row: base · 2ⁿ⁻¹, capped (no jitter: one host, one worker).
    backoff: Backoff = field(default_factory=lambda: Backoff(base_s=0.5, max_s=30.0))

    def __post_init__(self) -> None:
        if self.min_uptime_s < 0 or self.max_failed_starts < 1:
            raise ValueError(f"a restart policy needs min_uptime_s >= 0 ({self.min_uptime_s}) and max_failed_starts >= 1 ({self.max_failed_starts})")


@dataclass(frozen=True)
class Verdict:
    """What to do with a worker that exited: restart it after ``delay_s``, or give up (stop every
    worker and exit with ``exit_code``). ``failed_starts`` is the worker's count from now on."""

    action: Action
    failed_starts: int
    delay_s: float = 0.0
    exit_code: int = 0
    reason: str = ""


def exit_code_of(returncode: int) -> int:
    """The shell's exit code for a child's ``returncode``: a process killed by signal N
    (``returncode == -N``) is 128 + N, as a shell reports it."""
    return 128 - returncode if returncode < 0 else returncode


def describe_exit(returncode: int) -> str:
    """``exit code 3`` or ``killed by SIGKILL``, for log lines."""
    if returncode >= 0:
        return f"exit code {returncode}"
    try:
        return f"killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"killed by signal {-returncode}"


def decide(policy: RestartPolicy, returncode: int, uptime_s: float, failed_starts: int) -> Verdict:
    """The verdict on a worker that exited with ``returncode`` (``Popen.returncode``: negative for
    a signal) after running ``uptime_s``, having failed ``failed_starts`` starts in a row before.
    Only for an exit the supervisor did not ask for (a stop it requested is simply awaited)."""
    how = describe_exit(returncode)
    if returncode in FATAL_EXIT_CODES:
        return Verdict(Action.GIVE_UP, failed_starts, exit_code=returncode,
                       reason=f"{how}: {FATAL_EXIT_CODES[returncode]}; restarting it would fail the same way")  # fmt: skip
    failed = failed_starts + 1 if uptime_s < policy.min_uptime_s else 0
    if failed >= policy.max_failed_starts:
        return Verdict(Action.GIVE_UP, failed, exit_code=exit_code_of(returncode) or 1,
                       reason=f"{how} within {policy.min_uptime_s:g} s of starting, {failed} times in a row: it cannot start")  # fmt: skip
    if returncode == 0 and failed == 0:
        return Verdict(Action.RESTART, 0, reason=f"{how} without a stop requested")
    return Verdict(Action.RESTART, failed, delay_s=policy.backoff.ceiling(max(failed, 1)), reason=how)
