"""A child process of a test that writes its output to ``<dir>/out.log``: SIGKILL, a stop that
escalates, and the log's tail for a failure message."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path


class LoggedChild:
    """Subclasses set ``dir`` and start ``process`` themselves (their argv, cwd and environment differ)."""

    dir: Path
    process: subprocess.Popen[bytes] | None = None
    #: Seconds a SIGTERM gets before the SIGKILL.
    stop_timeout: float = 10
    #: Characters of the log a failure message shows.
    log_tail: int = 2000

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)

    def log(self) -> str:
        path = self.dir / "out.log"
        return path.read_text(errors="replace")[-self.log_tail:] if path.exists() else ""
