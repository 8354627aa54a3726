"""The Debezium connector postbox registers, as the pipeline sees it: its name and its state.

Why its own module: `postbox status` (the local stack), `postbox lag` and `postbox connector`
(any Connect cluster) all need the connector's name and a report of it and its tasks that never
raises; the library must not import the local stack to get them (the replication slot, the other
half of "do events reach Kafka", is :mod:`postbox.slot`). A pipeline's connector is the template
(``connectors/outbox.json``) with the pipeline's names set over it (:func:`render_connector`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from postbox.connect_client import ConnectClient, ConnectorFile, ConnectorState
from postbox.errors import PostboxError
from postbox.pipelines import DEFAULT, Pipeline

#: The default pipeline's connector (the name it has always had).
FALLBACK_NAME = DEFAULT.connector


def default_connector_name() -> str:
    """The default pipeline's connector name (``postbox-outbox``)."""
    return DEFAULT.connector


def render_connector(template: ConnectorFile, pipeline: Pipeline, database: str | None = None) -> ConnectorFile:
    """``template`` as ``pipeline``'s connector: its name, slot, publication, table and
    ``topic.prefix`` set to the pipeline's (:meth:`Pipeline.connector_settings`), every other
    setting as the file has it; ``database`` sets ``database.dbname`` (default: the template's,
    the Connect worker's ``${env:POSTBOX_CDC_DB_NAME}``)."""
    return replace(template, name=pipeline.connector, config={**template.config, **pipeline.connector_settings(database)})


def connector_status(connect_url: str, name: str | None = None, timeout: float = 5) -> dict[str, Any]:
    """``{"name", "state", "worker", "tasks": [{"id", "state", "worker", "error"}]}``; the state is
    Connect's (RUNNING, FAILED, ...), ``not registered`` or ``unreachable`` (with ``error``).
    Never raises: the report is what an alert needs. ``name``: default the default pipeline's."""
    name = name or default_connector_name()
    report: dict[str, Any] = {"name": name}
    try:
        with ConnectClient(connect_url, timeout=timeout) as client:
            status = client.status(name)
    except PostboxError as exc:
        return {**report, "state": "unreachable", "error": exc.message, "tasks": []}
    if status is None:
        return {**report, "state": "not registered", "tasks": []}
    return {**report, "state": status.connector_state, "worker": status.worker, "tasks": task_rows(status)}


def task_rows(state: ConnectorState) -> list[dict[str, Any]]:
    """Each task's id, state, worker and the first line of its error trace (None when healthy)."""
    return [
        {"id": t["id"], "state": t["state"], "worker": t.get("worker_id"), "error": _first_line(t.get("trace"))}
        for t in state.tasks
    ]


def flowing(report: dict[str, Any]) -> bool:
    """True when the connector and every one of its tasks (at least one) are RUNNING."""
    tasks = report.get("tasks") or []
    return report.get("state") == "RUNNING" and bool(tasks) and all(t.get("state") == "RUNNING" for t in tasks)


def _first_line(text: str | None) -> str | None:
    lines = (text or "").strip().splitlines()
    return lines[0] if lines else None


__all__ = ["FALLBACK_NAME", "connector_status", "default_connector_name", "flowing", "render_connector", "task_rows"]
