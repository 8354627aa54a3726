"""Helpers of the incident-CLI integration tests: run the CLI, emit raw outbox rows, run a consumer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "from postbox.cli import main; main()"]
#: The checkout's own code first: in a git worktree the venv's editable install points at another
#: checkout, whose postbox the subprocess would import instead.
PYTHONPATH = os.pathsep.join([str(ROOT / "src"), str(ROOT)])


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120, stdin: str | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": PYTHONPATH, "COLUMNS": "200", **(env or {})}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=full_env, timeout=timeout, input=stdin)


def cli_json(*args: str, env: dict[str, str] | None = None, expect: int | tuple[int, ...] = 0) -> Any:
    done = run_cli(*args, "--json", env=env)
    codes = (expect,) if isinstance(expect, int) else expect
    assert done.returncode in codes, f"postbox {' '.join(args)} → {done.returncode}\nstdout: {done.stdout[-3000:]}\nstderr: {done.stderr[-3000:]}"
    return json.loads(done.stdout)


def insert(conn: Any, aggregate_type: str, aggregate_id: str, event_type: str, payload: dict[str, Any]) -> str:
    """One outbox row with a UUIDv7 id and a JSON payload (like a stock Debezium outbox)."""
    from postbox.outbox import uuid7

    event_id = str(uuid7())
    conn.execute(
        "INSERT INTO postbox.outbox (id, aggregate_type, aggregate_id, event_type, payload) VALUES (%s, %s, %s, %s, %s)",
        (event_id, aggregate_type, aggregate_id, event_type, json.dumps(payload).encode()),
    )
    conn.commit()
    return event_id


class Consumer:
    """`postbox consume tests.apps.counting:strict` as a subprocess (stopped with SIGTERM)."""

    def __init__(self, group: str, topic: str, log: Path, env: dict[str, str] | None = None) -> None:
        self.group, self.topic, self.log = group, topic, log
        self.env = env or {}
        self.process: subprocess.Popen | None = None

    def start(self) -> "Consumer":
        env = {**os.environ, "PYTHONPATH": PYTHONPATH, "POSTBOX_METRICS_PORT": "0", "POSTBOX_HANDLER_RETRIES": "0",
               "POSTBOX_SESSION_TIMEOUT_MS": "10000", **self.env}
        handle = open(self.log, "ab")
        self.process = subprocess.Popen(
            [*CLI, "consume", "tests.apps.counting:strict", "--group", self.group, "--topics", self.topic,
             "--auto-offset-reset", "earliest"],
            stdout=handle, stderr=subprocess.STDOUT, env=env,
        )
        handle.close()
        return self

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None

    def logs(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""


def wait_for(predicate, timeout: float, what: str, interval: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")
