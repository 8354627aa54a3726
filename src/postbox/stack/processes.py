"""Start, find and stop the stack's long-running processes by pid file.

A pid file alone is not proof: after a reboot the pid may belong to something else. A process
counts as ours only if it is alive and its command line contains a marker we chose when we
started it (the state folder's path appears in every command line we build).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its parent) is not running, but a multi-threaded
    # process (a JVM) shows its main thread as a zombie while its other threads are still
    # exiting and still hold its sockets: it is gone only when no thread is left.
    try:
        with open(f"/proc/{pid}/stat") as handle:
            if handle.read().split(")")[-1].split()[0] != "Z":
                return True
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:
        return True


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def port_open(host: str, port: int, timeout: float = 0.3) -> bool:
    """True when something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def port_owner(port: int) -> str | None:
    """Best-effort 'name (pid N)' of the process listening on a TCP port, for error messages."""
    try:
        out = subprocess.run(["ss", "-H", "-ltnp", f"sport = :{port}"], capture_output=True, text=True, timeout=3)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = out.stdout.strip()
    if 'users:(("' in text:
        inner = text.split('users:(("', 1)[1]
        name = inner.split('"', 1)[0]
        pid = inner.split("pid=", 1)[1].split(",", 1)[0] if "pid=" in inner else "?"
        return f"{name} (pid {pid})"
    return None


def wait_until(
    check: Callable[[], bool],
    timeout: float,
    interval: float = 0.25,
    on_wait: Callable[[float], None] | None = None,
) -> bool:
    """Poll `check` until it is true or `timeout` seconds pass; `on_wait(elapsed)` shows progress."""
    start = time.monotonic()
    while True:
        if check():
            return True
        elapsed = time.monotonic() - start
        if elapsed >= timeout:
            return False
        if on_wait:
            on_wait(elapsed)
        time.sleep(interval)


START_BANNER = "==== postbox: starting "
_ERROR_LINE = re.compile(r"\b(ERROR|FATAL|Exception|Error:|# )|Address already in use")


@dataclass
class ManagedProcess:
    """A background process of the stack with its pid file and log file."""

    name: str
    pidfile: Path
    logfile: Path
    marker: str

    def pid(self) -> int | None:
        """The pid if the process is alive and really ours, else None (a stale pid file is removed)."""
        try:
            pid = int(self.pidfile.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        if pid_alive(pid) and self.marker in cmdline(pid):
            return pid
        self.pidfile.unlink(missing_ok=True)
        return None

    def running(self) -> bool:
        return self.pid() is not None

    def last_words(self, lines: int = 4) -> str:
        """The cause of an exit, from the log of the latest start: its error lines, else its last lines.

        Why: a start that fails in a temporary folder (CI, the fault suite) loses its log with the
        folder; the error has to carry the reason itself.
        """
        try:
            text = self.logfile.read_text(errors="replace")
        except OSError:
            return ""
        latest = text.rsplit(START_BANNER, 1)[-1].splitlines()[1:]
        errors = [line for line in latest if _ERROR_LINE.search(line)]
        chosen = (errors or latest)[-lines:]
        return " | ".join(line.strip()[:300] for line in chosen if line.strip())

    def exit_reason(self) -> str:
        """`` (log: …): <last words>`` for an error message about this process's exit."""
        words = self.last_words()
        return f" (log: {self.logfile})" + (f": {words}" if words else "")

    def start(self, argv: Sequence[str], env: Mapping[str, str] | None = None, cwd: Path | None = None,
              umask: int = -1) -> int:
        """Start detached (own session, so Ctrl-C in the shell does not kill it) and record the pid.

        ``umask``: for a process that writes files holding secrets (Redis and Sentinel rewriting
        their configuration with the replication password), 0o077 keeps them to the owner."""
        self.logfile.parent.mkdir(parents=True, exist_ok=True)
        self.pidfile.parent.mkdir(parents=True, exist_ok=True)
        with open(self.logfile, "ab") as log:
            log.write(f"\n{START_BANNER}{self.name} at {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())
            log.flush()
            proc = subprocess.Popen(
                list(argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(env) if env is not None else None,
                cwd=str(cwd) if cwd else None,
                start_new_session=True,
                umask=umask,
            )
        # Between fork and exec, /proc/<pid>/cmdline is still ours (python's): wait for the exec so
        # that `pid()` recognises the process by its marker from the first check on.
        wait_until(lambda: proc.poll() is not None or self.marker in cmdline(proc.pid), 10, interval=0.02)
        self.pidfile.write_text(f"{proc.pid}\n")
        return proc.pid

    def signal(self, sig: int) -> bool:
        pid = self.pid()
        if pid is None:
            return False
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return False
        return True

    def stop(self, timeout: float = 30.0) -> bool:
        """SIGTERM, wait up to `timeout` s, then SIGKILL. Returns True if something was stopped."""
        pid = self.pid()
        if pid is None:
            return False
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        if not wait_until(lambda: not pid_alive(pid), timeout, interval=0.1):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            wait_until(lambda: not pid_alive(pid), 10, interval=0.1)
        self.pidfile.unlink(missing_ok=True)
        return True

    def kill(self) -> bool:
        """SIGKILL at once (fault tests): no clean shutdown, the pid file stays until next check."""
        pid = self.pid()
        if pid is None:
            return False
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not pid_alive(pid), 10, interval=0.05)
        return True


class StackProcess:
    """What every loopback process of the stack answers alike, from its :class:`ManagedProcess`
    and its port: the address, the log, whether it runs, its pid, and a SIGKILL (fault tests)."""

    process: ManagedProcess
    port: int

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.process.logfile

    def running(self) -> bool:
        return self.process.running()

    def pid(self) -> int | None:
        return self.process.pid()

    def kill(self) -> bool:
        return self.process.kill()
