"""The demo's consumer processes: one ``postbox consume`` per group, with its own metrics port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

GROUP_APPS = {
    "inventory": "consumers.shop.inventory:app",
    "payment": "consumers.shop.payment:app",
    "shipping": "consumers.shop.shipping:app",
}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class ConsumerProcess:
    """One consumer group's process; ``restart`` starts a new generation on a new port."""

    name: str                     # inventory | payment | shipping
    group: str                    # the Kafka consumer group of this run
    cwd: Path
    env: dict[str, str]
    log_dir: Path
    proc: subprocess.Popen[bytes] | None = None
    port: int = 0
    generation: int = 0
    starts: list[float] = field(default_factory=list)
    _log: IO[bytes] | None = None

    def start(self) -> None:
        self.port = free_port()
        self.generation += 1
        env = {
            **self.env,
            "POSTBOX_GROUP": self.group,
            "POSTBOX_METRICS_PORT": str(self.port),
            "POSTBOX_METRICS_HOST": "127.0.0.1",
        }
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_dir / f"{self.name}.log", "ab")
        self._log.write(f"--- start generation {self.generation} at {time.strftime('%H:%M:%S')}\n".encode())
        self._log.flush()
        argv = [sys.executable, "-c", "from postbox.cli import main; main()", "consume", GROUP_APPS[self.name]]
        self.proc = subprocess.Popen(
            argv, cwd=self.cwd, env=env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.starts.append(time.monotonic())

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def kill(self) -> int | None:
        """SIGKILL (the chaos): no shutdown, no final commit."""
        pid = self.pid
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        return pid

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (a clean stop: the runtime commits and leaves the group), SIGKILL past ``timeout``."""
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGKILL)
                self.proc.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, lines: int = 15) -> str:
        path = self.log_dir / f"{self.name}.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def child_env(settings_env: dict[str, str], extra: dict[str, str]) -> dict[str, str]:
    # The parent's consumer settings (group, topics, port) must not leak into the demo's consumers.
    skip = {"POSTBOX_GROUP", "POSTBOX_TOPICS", "POSTBOX_METRICS_PORT", "POSTBOX_CLIENT_ID"}
    env = {k: v for k, v in os.environ.items() if k not in skip}
    env.update(settings_env)
    env.update(extra)
    return env
