"""``postbox consume --workers N``: the command line's side of the supervisor.

The supervisor runs each worker as ``python -m postbox consume`` with the command line it was given
(every flag and argument as parsed, ``--workers`` left out) plus the worker's own
``--instance-id`` and ``--metrics-port`` (:mod:`postbox.consumer.worker_plan`); the environment
is passed on, with ``POSTBOX_WORKERS=1`` so a worker never supervises in turn. The configuration
was loaded and checked once before any worker starts, so a mistake in it is one error (exit 1),
not N workers failing and restarting.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Collection
from typing import Any, Optional

import typer

from postbox.errors import ConfigError

#: The environment variable of ``--workers``.
WORKERS_ENV = "POSTBOX_WORKERS"
#: Parameters the supervisor sets per worker, or that a worker must not see.
PER_WORKER = frozenset({"workers", "instance_id", "metrics_port", "check"})


def worker_count(flag: Optional[str]) -> int:
    """``--workers`` (or ``POSTBOX_WORKERS``) as a count; a bad value names where it came from."""
    from postbox.consumer.worker_plan import parse_workers

    raw = flag if flag is not None else os.environ.get(WORKERS_ENV) or "1"
    try:
        return parse_workers(raw)
    except ValueError as exc:
        if flag is not None:
            raise typer.BadParameter(f"{flag!r}: expected {exc}", param_hint="--workers") from None
        raise ConfigError(f"{WORKERS_ENV}={raw!r}: expected {exc}", fix=f"set {WORKERS_ENV} to a number of workers or 'auto'") from None


def command_line(ctx: Any, leave_out: Collection[str] = PER_WORKER) -> list[str]:
    """The command's arguments and options as parsed, back as a command line (``leave_out``: parameter
    names left out). A flag that is off and an option not given are left out; the environment,
    passed on as it is, gives the worker the same values it gave here."""
    arguments: list[str] = []
    options: list[str] = []
    for param in ctx.command.params:
        value = ctx.params.get(param.name)
        if param.name in leave_out or value is None or value is False or (isinstance(value, (list, tuple)) and not value):
            continue
        if param.param_type_name == "argument":
            arguments.append(str(value))
        elif getattr(param, "is_flag", False):
            options.append(param.opts[0])
        elif getattr(param, "multiple", False):
            options += [item for v in value for item in (param.opts[0], str(v))]
        else:
            options += [param.opts[0], str(value)]
    return arguments + options


def run_workers(ctx: Any, app: Any, config: Any, count: int) -> int:
    """Supervise ``count`` workers of ``app`` with ``config``'s group; the exit code of the whole."""
    from postbox.consumer import instance, worker_plan
    from postbox.consumer.logs import log_event
    from postbox.consumer.supervised import SUPERVISOR_PID_ENV, WORKER_INDEX_ENV
    from postbox.consumer.supervisor import Supervisor

    try:
        names = worker_plan.instance_ids(config.instance_id, count, lambda: instance.claim_default(config.group, app.name))
        ports = worker_plan.metrics_ports(config.metrics_port, count)
    except ValueError as exc:
        raise ConfigError(f"--workers {count}: {exc}", fix="pick a shorter --instance-id or a lower --metrics-port") from None
    base = [sys.executable, "-m", "postbox", "consume", *command_line(ctx)]

    def command(i: int) -> list[str]:
        return [*base, "--instance-id", names[i], "--metrics-port", str(ports[i])]

    def environment(i: int) -> dict[str, str]:
        return {**os.environ, WORKERS_ENV: "1", SUPERVISOR_PID_ENV: str(os.getpid()), WORKER_INDEX_ENV: str(i)}

    log_event(logging.getLogger("postbox.consumer.supervisor"), logging.INFO, "supervisor starting", group=config.group,
              workers=count, instance_ids=",".join(names), metrics_ports=",".join(map(str, ports)))  # fmt: skip
    return Supervisor(count, command, environment).run()
