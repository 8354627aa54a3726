"""The Debezium connector on Kafka Connect, as the incident commands see it: its state, and what
applying a connector file would change.

The CLI asks one function here and renders the report it returns; the decisions (which settings
differ, which task error line to show, which settings are secret) are made here, not in the CLI.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from postbox.connect_client import ConnectClient, ConnectorFile, ConnectorState
from postbox.connector import task_rows


@dataclass
class ConnectorReport:
    """`postbox connector status`: state, tasks and the configuration without secrets."""

    name: str
    state: ConnectorState | None
    config: dict[str, str] = field(default_factory=dict)

    @property
    def registered(self) -> bool:
        return self.state is not None

    @property
    def running(self) -> bool:
        return self.state is not None and self.state.running

    def as_dict(self) -> dict[str, Any]:
        if self.state is None:
            return {"name": self.name, "state": "not registered", "tasks": [], "config": None}
        return {"name": self.name, "state": self.state.connector_state, "worker": self.state.worker,
                "running": self.state.running, "tasks": task_rows(self.state), "config": self.config}


def connector_report(client: ConnectClient, name: str) -> ConnectorReport:
    """The connector's state and its configuration (password settings left out)."""
    state = client.status(name)
    if state is None:
        return ConnectorReport(name, None)
    config = client.config(name) or {}
    return ConnectorReport(name, state, {k: v for k, v in config.items() if "password" not in k.lower()})


@dataclass
class ApplyPlan:
    """What `postbox connector apply` would do: create, update these settings, or nothing."""

    connector: ConnectorFile
    exists: bool
    changes: list[str]

    @property
    def unchanged(self) -> bool:
        return self.exists and not self.changes

    def question(self, file: Path) -> str:
        verb = "create" if not self.exists else f"update {len(self.changes)} setting(s) of"
        return f"{verb} connector {self.connector.name} from {file}?"


def plan_apply(client: ConnectClient, connector: ConnectorFile) -> ApplyPlan:
    """Compare the registered configuration with ``connector``'s: the names of the settings that differ."""
    current = client.config(connector.name)
    wanted = {**connector.config, "name": connector.name}
    have = current or {}
    changes = sorted(k for k in set(wanted) | set(have) if have.get(k) != wanted.get(k))
    return ApplyPlan(connector, current is not None, changes)


def restart_audit(name: str, before: ConnectorState, after: ConnectorState | None, ok: bool) -> Any:
    """The audit record of a connector restart (state before and after)."""
    from postbox.incident.audit import AuditRecord

    return AuditRecord(command="connector restart", target=name, count=1, outcome="ok" if ok else "failed",
                       details={"before": before.connector_state, "after": after.connector_state if after else None})


def apply_audit(plan: ApplyPlan, file: Path, outcome: str) -> Any:
    """The audit record of a connector apply (which settings changed, from which file)."""
    from postbox.incident.audit import AuditRecord

    return AuditRecord(command="connector apply", target=plan.connector.name, count=len(plan.changes), outcome="ok",
                       details={"file": str(file), "outcome": outcome, "changed": plan.changes})
