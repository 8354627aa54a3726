"""The supervisor of ``postbox consume --workers N``: N worker processes, one group member each.

Why subprocesses (each worker a ``python -m postbox consume`` of its own) and not ``fork``: a worker
holds librdkafka's and redis-py's threads and locks, which a fork copies in whatever state they
were (a forked child can deadlock on a lock a thread of the parent held). Each worker is exactly
the process a single ``postbox consume`` is — its start-up checks, its exit codes, its shutdown —
so the supervisor only starts, watches and signals processes, and imports no Kafka client.

- Each worker runs in a process group of its own, so a terminal's Ctrl-C (sent to the foreground
  group) reaches the supervisor only, which forwards it once: a worker seeing it twice would stop
  at once without its final commit.
- SIGTERM/SIGINT to the supervisor: forwarded to every worker (each finishes its batch, commits,
  leaves the group and exits 0), pending restarts are dropped, the supervisor exits once every
  worker did: 0 when all exited 0, else the first other code. A second signal is forwarded too
  (the workers then stop at once, as a single consumer does on a second signal).
- A worker that exits on its own is restarted or given up on by
  :func:`postbox.consumer.restart_policy.decide`; giving up stops the other workers the same
  orderly way and exits with the failing worker's code.
- Workers notice a supervisor that died without stopping them (SIGKILL) and stop cleanly
  (:mod:`postbox.consumer.supervised`).
"""

from __future__ import annotations

import logging
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from postbox.consumer.logs import log_event
from postbox.consumer.restart_policy import Action, RestartPolicy, Verdict, decide, describe_exit, exit_code_of

log = logging.getLogger("postbox.consumer.supervisor")

#: How often the supervisor looks at its workers (and at a signal it received).
POLL_S = 0.1


@dataclass
class Worker:
    """One worker slot: its process (None while it waits for a restart) and its restart state."""

    index: int
    process: "subprocess.Popen[bytes] | None" = None
    started_at: float = 0.0
    failed_starts: int = 0
    restart_at: float | None = None
    returncode: int | None = None


@dataclass
class Supervisor:
    """Run ``count`` workers until a signal or a worker that cannot be restarted (module docs).

    ``command(i)`` and ``environment(i)`` give worker ``i``'s command line and environment (the
    same ``i`` at every restart: its instance id and metrics port stay its own)."""

    count: int
    command: Callable[[int], Sequence[str]]
    environment: Callable[[int], Mapping[str, str]]
    policy: RestartPolicy = field(default_factory=RestartPolicy)
    clock: Callable[[], float] = time.monotonic
    workers: list[Worker] = field(init=False)
    _signals: list[int] = field(init=False, default_factory=list)
    _forwarded: int = field(init=False, default=0)
    _given_up: Verdict | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"a supervisor needs at least one worker, not {self.count}")
        self.workers = [Worker(i) for i in range(self.count)]

    @property
    def stopping(self) -> bool:
        return bool(self._signals) or self._given_up is not None

    def run(self) -> int:
        """Start the workers and supervise them; the exit code of the whole (module docs)."""
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            for worker in self.workers:
                self._start(worker)
            while not self.stopping or any(w.process is not None for w in self.workers):
                self._turn()
                time.sleep(POLL_S)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._kill_leftovers()
        return self._exit_code()

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self._signals.append(signum)  # forwarded by the loop (no process calls inside a handler)

    def _turn(self) -> None:
        """One look at every worker: forward new signals, reap exits, start due restarts."""
        self._forward_signals()
        now = self.clock()
        for worker in self.workers:
            if worker.process is not None and worker.process.poll() is not None:
                self._exited(worker, now)
            elif worker.process is None and worker.restart_at is not None and now >= worker.restart_at:
                self._start(worker)

    def _forward_signals(self) -> None:
        while self._forwarded < len(self._signals):
            signum = self._signals[self._forwarded]
            self._forwarded += 1
            log_event(log, logging.INFO, "signal received: forwarding it to every worker", signal=signal.Signals(signum).name,
                      workers=sum(w.process is not None for w in self.workers))  # fmt: skip
            self._send_all(signum)

    def _send_all(self, signum: int) -> None:
        for worker in self.workers:
            if worker.process is None:  # waiting for a restart: it stays stopped, its crash is not the stop's outcome
                worker.restart_at, worker.returncode = None, None
            elif worker.process.poll() is None:
                worker.process.send_signal(signum)

    def _start(self, worker: Worker) -> None:
        worker.restart_at = None
        worker.started_at = self.clock()
        worker.process = subprocess.Popen(list(self.command(worker.index)), env=dict(self.environment(worker.index)), process_group=0)
        log_event(log, logging.INFO, "worker started", worker=worker.index, pid=worker.process.pid)

    def _exited(self, worker: Worker, now: float) -> None:
        assert worker.process is not None
        returncode, pid = worker.process.returncode, worker.process.pid
        worker.process, worker.returncode = None, returncode
        if self.stopping:
            if -returncode in self._signals:
                # Ended by the stop signal itself: it came before the worker's runtime installed its
                # handler (the first thing its run does), so it had consumed nothing to commit.
                worker.returncode = 0
                log_event(log, logging.INFO, "worker stopped before it started consuming", worker=worker.index, pid=pid,
                          exit=describe_exit(returncode))  # fmt: skip
                return
            level = logging.INFO if returncode == 0 else logging.WARNING
            log_event(log, level, "worker stopped", worker=worker.index, pid=pid, exit=describe_exit(returncode))
            return
        verdict = decide(self.policy, returncode, now - worker.started_at, worker.failed_starts)
        worker.failed_starts = verdict.failed_starts
        if verdict.action is Action.RESTART:
            worker.restart_at = now + verdict.delay_s
            log_event(log, logging.WARNING, "worker exited: restarting it", worker=worker.index, pid=pid, why=verdict.reason,
                      restart_in_s=round(verdict.delay_s, 2), failed_starts=verdict.failed_starts)  # fmt: skip
            return
        self._given_up = verdict
        log_event(log, logging.ERROR, f"worker {worker.index} is not restarted: {verdict.reason}; stopping the other workers",
                  worker=worker.index, pid=pid, exit_code=verdict.exit_code)  # fmt: skip
        self._send_all(signal.SIGTERM)

    def _exit_code(self) -> int:
        if self._given_up is not None:
            return self._given_up.exit_code
        codes = [exit_code_of(w.returncode) for w in self.workers if w.returncode is not None]
        return next((code for code in codes if code != 0), 0)

    def _kill_leftovers(self) -> None:
        """Workers still running when the supervisor itself fails (an exception in the loop)."""
        for worker in self.workers:
            if worker.process is not None and worker.process.poll() is None:
                worker.process.kill()
                worker.process.wait()
