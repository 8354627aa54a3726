"""The `postbox` command line: one typer app, one module per group of commands.

Expected failures (PostboxError) print as one line plus the fix and exit 1; usage errors exit 2;
nothing a user can cause ends in a traceback. A command whose stdout reader went away
(``postbox tail … | head -1``) stops quietly with exit 141, as coreutils do (128 + SIGPIPE).
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType
from typing import Any

import typer
from typer.core import TyperGroup

from postbox.errors import PostboxError

#: Exit code when stdout's reader went away: what a shell reports for a coreutils command killed by
#: SIGPIPE (128 + 13), so `set -o pipefail` scripts see postbox as they see `cat`.
EXIT_STDOUT_CLOSED = 141


class StdoutClosed(Exception):
    """stdout's reader went away. Deliberately not an OSError: click turns a broken pipe into exit 1
    ("a problem was found"); this passes through it to :func:`main`."""


class _Commands(TyperGroup):
    """The root command group: a broken pipe while a command (or a help text) writes becomes
    :class:`StdoutClosed`. SIGPIPE keeps Python's default (ignored, so writes fail with EPIPE):
    restoring SIG_DFL process-wide would also kill a consumer on a socket write."""

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().make_context(*args, **kwargs)
        except BrokenPipeError:
            raise StdoutClosed() from None

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            raise StdoutClosed() from None


def _flags_read_as_flags() -> None:
    """Every help page shows a boolean flag as a flag (``--execute``), not ``--execute <bool>``.

    The cause is typer 0.29's rich help (the help postbox prints): its options panel writes
    ``display_type_rich()`` after every option, and ``TyperOption.display_type_rich`` does not
    skip flags — the plain help (``get_help_record``) does (``if not self.is_flag``). Every option
    of every command is a ``TyperOption``, so the fix is made here, once: a flag (or a counter)
    has no value to describe. Kept in one place until typer's rich help skips flags itself."""
    from typer.core import TyperOption

    original = TyperOption.display_type_rich
    if getattr(original, "flags_read_as_flags", False):
        return

    def display_type_rich(self: TyperOption, ctx: Any) -> str | None:
        if self.is_flag or self.count:
            return None
        return original(self, ctx)

    display_type_rich.flags_read_as_flags = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_flags_read_as_flags()

app = typer.Typer(
    cls=_Commands,
    name="postbox",
    help="Transactional outbox → Debezium → Kafka → exactly-once effects in Redis.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from postbox import __version__

        typer.echo(f"postbox {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print postbox's version and exit."),
) -> None:
    """Transactional outbox → Debezium → Kafka → exactly-once effects in Redis."""


#: The module that registers each command, by the name typed after ``postbox``. A command line
#: that starts with one of them attaches that module alone: every other module's imports (rich
#: tables, the codec, the incident tools) cost a CLI process ~0.3 s of CPU, seconds on a loaded host,
#: and matter most for ``postbox consume``, which after a crash is back only once Python has
#: imported what it needs. Anything else (``--help``, a global option first, a mistyped
#: command) attaches them all, so help and "no such command" list every command.
#: ``tests/unit/test_cli_command_modules.py`` holds this table to what each module registers.
COMMAND_MODULES: dict[str, str] = {
    "up": "stack_cmds", "down": "stack_cmds", "status": "stack_cmds", "env": "stack_cmds",
    "schemas": "schemas_cmds", "db": "db_cmds", "consume": "consume_cmds", "topics": "topics_cmds",
    "tail": "tail_cmds", "trace": "trace_cmds", "lag": "lag_cmds", "exporter": "exporter_cmds",
    "dlq": "dlq_cmds", "replay": "replay_cmds", "connector": "connector_cmds", "doctor": "doctor_cmds",
    "audit": "audit_cmds", "demo": "demo_cmds", "acl": "acl_cmds", "reconcile": "reconcile_cmds",
}  # fmt: skip

_attached: set[ModuleType] = set()


def _command_modules(args: list[str]) -> tuple[ModuleType, ...]:
    """The command modules to attach, in the order `postbox --help` lists them: the command's own
    module when ``args`` starts with a command of :data:`COMMAND_MODULES`, else every one. Each
    exposes ``register(app)``; a missing module is an import error at once, not a command that
    silently disappears."""
    own = COMMAND_MODULES.get(args[0]) if args else None
    if own is not None:
        return (importlib.import_module(f"postbox.cli.{own}"),)
    from postbox.cli import (
        acl_cmds, audit_cmds, connector_cmds, consume_cmds, db_cmds, demo_cmds, dlq_cmds, doctor_cmds, exporter_cmds,
        lag_cmds, reconcile_cmds, replay_cmds, schemas_cmds, stack_cmds, tail_cmds, topics_cmds, trace_cmds,
    )  # fmt: skip

    return (stack_cmds, schemas_cmds, db_cmds, consume_cmds, topics_cmds, tail_cmds, trace_cmds, reconcile_cmds, lag_cmds,
            exporter_cmds, dlq_cmds, replay_cmds, connector_cmds, doctor_cmds, audit_cmds, acl_cmds, demo_cmds)  # fmt: skip


def _register(argv: list[str] | None = None) -> None:
    """Attach the command modules: the command's own when the command line starts with a command
    of :data:`COMMAND_MODULES`, else every one; a module is attached once per process (main() runs
    several times in one process in the tests)."""
    args = sys.argv[1:] if argv is None else argv
    for module in _command_modules(args):
        if module not in _attached:
            module.register(app)
            _attached.add(module)


def _click_exception_types() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """Usage-error and click-error classes: typer >= 0.20 vendors click as `typer._click` (other
    classes than a separately installed click, which may not be installed at all)."""
    usage: tuple[type, ...] = ()
    clicks: tuple[type, ...] = ()
    for module in ("typer._click.exceptions", "click.exceptions"):
        try:
            exceptions = importlib.import_module(module)
        except ImportError:
            continue
        usage += (exceptions.UsageError,)
        clicks += (exceptions.ClickException,)
    return usage, clicks


def _stdout_closed() -> None:
    """Exit quietly after stdout's reader went away: fd 1 now points at /dev/null, so the flush of
    whatever is still buffered (at exit) cannot fail and print "Exception ignored"."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    sys.exit(EXIT_STDOUT_CLOSED)


def _fd_identity(fd: int) -> tuple[int, int] | None:
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _rich_met_a_closed_stdout(before: tuple[int, int] | None) -> bool:
    """True when rich met a broken pipe: its ``Console.on_broken_pipe`` (tables, typer's help)
    points fd 1 at /dev/null and raises SystemExit(1) — nothing else in postbox does that."""
    now = _fd_identity(1)
    try:
        null = os.stat(os.devnull)
    except OSError:
        return False
    return now is not None and now != before and now == (null.st_dev, null.st_ino)


def main() -> None:
    """Console-script entry point."""
    from postbox.cli.fatal_lines import json_requested

    _register()
    stdout_before = _fd_identity(1)
    json_lines = json_requested(sys.argv[1:], os.environ)
    try:
        result = app(standalone_mode=False)
        sys.stdout.flush()  # a reader gone after the last write shows here, not at exit
    except (StdoutClosed, BrokenPipeError):
        _stdout_closed()
    except KeyboardInterrupt:
        sys.exit(130)
    except SystemExit as exc:
        if exc.code == 1 and _rich_met_a_closed_stdout(stdout_before):
            sys.exit(EXIT_STDOUT_CLOSED)
        raise
    except typer.Abort:
        sys.exit(1)
    except Exception as exc:  # click usage errors arrive here in non-standalone mode
        sys.exit(_report(exc, json_lines))
    sys.exit(result if isinstance(result, int) else 0)


def _report(exc: Exception, json_lines: bool) -> int:
    """Write the error that ended the command; its exit code. A PostboxError is one line and its
    fix (1), a usage error click's usage text (2). Anything else is a bug and keeps its traceback:
    re-raised, or with ``json_lines`` (``consume --log-format json``) one JSON line carrying it."""
    from postbox.cli import fatal_lines

    usage, clicks = _click_exception_types()
    if isinstance(exc, PostboxError):
        if not json_lines:
            from postbox.cli.output import print_error

            print_error(exc)
        else:
            fatal_lines.write(exc.message, exit_code=1, fix=exc.fix)
        return 1
    if isinstance(exc, clicks):
        code = 2 if isinstance(exc, usage) else int(getattr(exc, "exit_code", 1))
        if not json_lines:
            exc.show()  # type: ignore[attr-defined]
        else:
            fatal_lines.write(exc.format_message(), exit_code=code, fix="see postbox consume --help")  # type: ignore[attr-defined]
        return code
    if not json_lines:
        raise exc
    fatal_lines.write(f"unexpected error: {type(exc).__name__}: {exc}", exit_code=1, exc=exc)
    return 1
