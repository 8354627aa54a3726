"""What every incident command group shares: its options, the Kafka handle, confirmation, audit.

Incident commands print a rich table by default and a stable JSON document with ``--json``; exit
codes: 0 ok, 1 a problem was found or an expected failure happened (one line + fix, no
traceback), 2 usage error. Commands are read-only unless their purpose is to change something
(``dlq replay --execute``, ``replay``, ``connector restart|apply``); those ask for confirmation
unless ``--yes`` and append an audit record (``postbox audit``). See docs/incident.md.

The helpers live here, once, so a group module holds only its commands: parse the flags, call one
function of :mod:`postbox.incident`, render what it returns.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, Optional

import typer
from rich.markup import escape

from postbox.cli.client_options import command_settings
from postbox.cli.output import err_console
from postbox.errors import PostboxError
from postbox.settings import Settings

JsonOpt = typer.Option(False, "--json", help="Print one JSON document (stable shape) instead of tables.")
KafkaOpt = typer.Option(None, "--kafka-bootstrap", help="Kafka bootstrap servers (env POSTBOX_KAFKA_BOOTSTRAP).")
RedisOpt = typer.Option(None, "--redis-url", help="Redis URL (env POSTBOX_REDIS_URL).")
ConnectOpt = typer.Option(None, "--connect-url", help="Kafka Connect URL (env POSTBOX_CONNECT_URL).")
DbOpt = typer.Option(None, "--database-url", help="PostgreSQL URL (env POSTBOX_DATABASE_URL).")
YesOpt = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation.")
PipelineOpt = typer.Option(None, "--pipeline", help="Which service's outbox pipeline: its outbox table, slot, publication and connector (env POSTBOX_PIPELINE; default: the default pipeline, postbox.outbox).")


def pipeline_for(flag: Optional[str]) -> Any:
    """The command's :class:`~postbox.pipelines.Pipeline`: ``--pipeline``, else POSTBOX_PIPELINE, else the default."""
    from postbox.pipelines import Pipeline

    return Pipeline.parse(flag)


def settings_for(**overrides: Optional[str]) -> Settings:
    """The command's settings: its endpoint flags and Kafka client options over the environment."""
    return command_settings(**overrides)


@contextmanager
def kafka_for(settings: Settings) -> Iterator[Any]:
    """A :class:`postbox.kafka_cluster.Kafka` handle, closed when the command is done with it."""
    from postbox.kafka_cluster import Kafka

    kafka = Kafka(settings.kafka_bootstrap, properties=settings.kafka_properties)
    try:
        yield kafka
    finally:
        kafka.close()


def progress(label: str) -> Any:
    """A progress callable for long scans (quiet for the first second, then one line a second)."""
    from postbox.incident.progress import ScanProgress

    return ScanProgress(label, write=lambda line: err_console.print(line, style="dim", highlight=False, markup=False))


def confirm(question: str, yes: bool) -> None:
    """Ask before changing something; refuse (one line + fix) when nobody can answer."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise PostboxError(f"{question} — refusing without confirmation (stdin is not a terminal)", fix="pass --yes to confirm")
    if not typer.confirm(question, default=False, err=True):
        err_console.print("nothing changed")
        raise typer.Exit(1)


def marker_ttl(flag: Optional[str]) -> timedelta:
    """The dedupe marker TTL the groups use (flag, env, default)."""
    from postbox.incident.redis_state import marker_ttl as resolve

    return resolve(flag)


def duration(text: Optional[str], option: str) -> Optional[timedelta]:
    """``text`` as a duration, or a usage error naming ``option``."""
    if not text:
        return None
    from postbox.durations import parse_duration

    try:
        return parse_duration(text, option)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None


def group_id(ctx: typer.Context, param: typer.CallbackParam, value: Any) -> Any:
    """A consumer group id (or several): Kafka refuses an empty one (INVALID_GROUP_ID), so it is a
    usage error here, before any request."""
    for item in value if isinstance(value, (list, tuple)) else [value]:
        if item is not None and not item.strip():
            raise typer.BadParameter("a consumer group id cannot be empty (`postbox lag` lists the groups)")
    return value


def time_point(text: Optional[str], option: str) -> Optional[datetime]:
    """``text`` as an instant: an ISO-8601 time, or a duration ago (``2h``); a usage error naming ``option``."""
    if not text:
        return None
    from postbox.incident.records import parse_iso

    when = parse_iso(text)
    if when is not None:
        return when
    from postbox.incident.records import ago

    back = duration(text, option)
    return ago(back) if back is not None else None


def event_id(text: str, option: str = "EVENT_ID") -> str:
    """``text`` as an event id, or a usage error naming ``option``."""
    from postbox.incident.trace import parse_event_id

    try:
        return parse_event_id(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None


def write_audit(kafka: Any, record: Any) -> dict[str, Any] | None:
    """Append an audit record; on failure print it (so it can be filed by hand) and return None."""
    from postbox.incident.audit import append

    try:
        where = append(kafka, record)
    except PostboxError as exc:
        err_console.print(f"[bold red]audit:[/] {escape(exc.message)}", highlight=False)
        err_console.print(json.dumps(record.as_dict(), sort_keys=True), highlight=False, markup=False)
        return None
    return {**record.as_dict(), **where}


def number(n: Any) -> str:
    """An int with thousands separators; None as empty."""
    return f"{n:,}" if isinstance(n, int) else ("" if n is None else str(n))


def shorten(value: Any, width: int = 80) -> str:
    """``value`` as text, cut to ``width`` characters with an ellipsis."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str, sort_keys=True)
    return text if len(text) <= width else text[: width - 1] + "…"
