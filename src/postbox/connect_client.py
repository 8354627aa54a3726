"""A small client for Kafka Connect's REST API and the connector files in `connectors/`.

Registration is `PUT /connectors/{name}/config`, which creates or updates: applying the same file
twice is a no-op (we compare first, so an unchanged connector is not even reconfigured).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import httpx

from postbox.errors import ConnectError, PostboxError


@dataclass(frozen=True)
class ConnectorFile:
    """A connector as stored in `connectors/<file>.json`: {"name": ..., "config": {...}}."""

    path: Path
    name: str
    config: dict[str, str]

    @classmethod
    def load(cls, path: Path) -> "ConnectorFile":
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise PostboxError(f"connector file {path} does not exist") from None
        except json.JSONDecodeError as exc:
            raise PostboxError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg})") from None
        if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not isinstance(data.get("config"), dict):
            raise PostboxError(f'{path}: expected an object {{"name": "...", "config": {{...}}}}')
        bad = [k for k, v in data["config"].items() if not isinstance(v, str)]
        if bad:
            raise PostboxError(f"{path}: config values must be strings (Connect's REST API): {', '.join(bad)}")
        return cls(path=path, name=data["name"], config=dict(data["config"]))


@dataclass
class ConnectorState:
    name: str
    connector_state: str
    worker: str | None
    tasks: list[dict[str, Any]] = field(default_factory=list)

    @property
    def running(self) -> bool:
        return self.connector_state == "RUNNING" and bool(self.tasks) and all(t["state"] == "RUNNING" for t in self.tasks)

    def describe(self) -> str:
        """``connector RUNNING, task 0 UNASSIGNED`` — what a wait for RUNNING is waiting on (the
        connector is often RUNNING seconds before its task)."""
        tasks = ", ".join(f"task {t.get('id', i)} {t.get('state', '?')}" for i, t in enumerate(self.tasks)) or "no task yet"
        return f"connector {self.connector_state}, {tasks}"

    @property
    def failed_trace(self) -> str | None:
        for task in self.tasks:
            if task.get("state") == "FAILED":
                return (task.get("trace") or "").strip()
        return None


def _path(name: str) -> str:
    """``/connectors/<name>`` with the name percent-encoded: a name holding ``?``, ``#`` or ``/``
    must name that connector, not add a query to, or walk out of, another connector's path."""
    from urllib.parse import quote

    return "/connectors/" + quote(name, safe="")


class ConnectClient:
    def __init__(self, url: str, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "ConnectClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ConnectError(
                f"Kafka Connect at {self.url} is unreachable ({exc.__class__.__name__}: {exc})",
                fix="start it with `postbox up`, or point POSTBOX_CONNECT_URL at your Connect cluster",
            ) from None

    @staticmethod
    def _raise_for(response: httpx.Response, what: str) -> None:
        if response.status_code >= 400:
            try:
                message = response.json().get("message", response.text)
            except ValueError:
                message = response.text
            raise ConnectError(f"{what}: HTTP {response.status_code}: {message}")

    def connectors(self) -> list[str]:
        response = self._request("GET", "/connectors")
        self._raise_for(response, "listing connectors")
        return list(response.json())

    def config(self, name: str) -> dict[str, str] | None:
        response = self._request("GET", f"{_path(name)}/config")
        if response.status_code == 404:
            return None
        self._raise_for(response, f"reading connector {name}")
        return dict(response.json())

    def apply(self, connector: ConnectorFile) -> str:
        """Create or update; returns 'created', 'updated' or 'unchanged'."""
        current = self.config(connector.name)
        wanted = {**connector.config, "name": connector.name}
        if current is not None and current == wanted:
            return "unchanged"
        response = self._request("PUT", f"{_path(connector.name)}/config", json=connector.config)
        self._raise_for(response, f"applying {connector.path}")
        return "created" if current is None else "updated"

    def status(self, name: str) -> ConnectorState | None:
        response = self._request("GET", f"{_path(name)}/status")
        if response.status_code == 404:
            return None
        self._raise_for(response, f"reading the status of connector {name}")
        data = response.json()
        return ConnectorState(
            name=name,
            connector_state=data["connector"]["state"],
            worker=data["connector"].get("worker_id"),
            tasks=sorted(data.get("tasks", []), key=lambda t: t["id"]),
        )

    def restart(self, name: str, include_tasks: bool = True) -> None:
        response = self._request("POST", f"{_path(name)}/restart", params={"includeTasks": str(include_tasks).lower()})
        self._raise_for(response, f"restarting connector {name}")

    def delete(self, name: str) -> bool:
        response = self._request("DELETE", _path(name))
        if response.status_code == 404:
            return False
        self._raise_for(response, f"deleting connector {name}")
        return True

    def wait_running(
        self,
        name: str,
        timeout: float,
        on_wait: Callable[[float, ConnectorState | None], None] | None = None,
        log_hint: str = "",
    ) -> ConnectorState:
        """Wait until the connector and all its tasks are RUNNING; fail fast on FAILED."""
        start = time.monotonic()
        while True:
            state = self.status(name)
            if state is not None:
                if state.running:
                    return state
                trace = state.failed_trace
                if trace or state.connector_state == "FAILED":
                    first = (trace or "").splitlines()[0] if trace else "connector FAILED"
                    raise ConnectError(f"connector {name} failed: {first}{log_hint}")
            elapsed = time.monotonic() - start
            if elapsed > timeout:
                shown = state.connector_state if state else "not registered"
                raise ConnectError(f"connector {name} not RUNNING after {timeout:.0f} s (state: {shown}){log_hint}")
            if on_wait:
                on_wait(elapsed, state)
            time.sleep(0.5)
