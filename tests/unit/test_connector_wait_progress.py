"""`postbox up` waits until the connector *and its task* are RUNNING; its progress line says which
one it is waiting on. Found as a new user: the line read "waiting for RUNNING… 7s (now: RUNNING)"
four times over, because only the connector's state was shown while the task was not running yet."""

from __future__ import annotations

from postbox.connect_client import ConnectorState
from postbox.stack.stack import _ticker


def test_the_wait_names_the_task_it_waits_for() -> None:
    lines: list[str] = []
    tick = _ticker(lines.append, "connector c: waiting for RUNNING", with_state=True)
    tick(0.0, None)
    tick(2.0, ConnectorState("c", "RUNNING", "w", []))
    tick(4.0, ConnectorState("c", "RUNNING", "w", [{"id": 0, "state": "UNASSIGNED", "worker_id": "w"}]))
    assert lines == [
        "connector c: waiting for RUNNING… 0s (now: registering)",
        "connector c: waiting for RUNNING… 2s (now: connector RUNNING, no task yet)",
        "connector c: waiting for RUNNING… 4s (now: connector RUNNING, task 0 UNASSIGNED)",
    ]
