"""The `postbox` command line: one typer app, one module per group of commands.

Expected failures (PostboxError) print as one line plus the fix and exit 1; usage errors exit 2;
nothing a user can cause ends in a traceback.
"""

from __future__ import annotations

import importlib
import sys

import typer

from postbox.errors import PostboxError

app = typer.Typer(
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


def _register() -> None:
    """Attach every command module. Each module exposes `register(app)`; the list is static, so a
    missing module is an import error at once, not a command that silently disappears."""
    from postbox.cli import (
        audit_cmds,
        connector_cmds,
        consume_cmds,
        db_cmds,
        demo_cmds,
        doctor_cmds,
        dlq_cmds,
        exporter_cmds,
        lag_cmds,
        replay_cmds,
        schemas_cmds,
        stack_cmds,
        tail_cmds,
        topics_cmds,
        trace_cmds,
    )

    modules = (
        stack_cmds,
        schemas_cmds,
        db_cmds,
        consume_cmds,
        topics_cmds,
        tail_cmds,
        trace_cmds,
        lag_cmds,
        exporter_cmds,
        dlq_cmds,
        replay_cmds,
        connector_cmds,
        doctor_cmds,
        audit_cmds,
        demo_cmds,
    )
    if app.registered_commands:  # already attached (main() run twice in one process, as the tests do)
        return
    for module in modules:
        module.register(app)


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


def main() -> None:
    """Console-script entry point."""
    _register()
    try:
        result = app(standalone_mode=False)
    except PostboxError as exc:
        from postbox.cli.output import print_error

        print_error(exc)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    except SystemExit:
        raise
    except typer.Abort:
        sys.exit(1)
    except Exception as exc:  # click usage errors arrive here in non-standalone mode
        usage, clicks = _click_exception_types()
        if isinstance(exc, usage):
            exc.show()
            sys.exit(2)
        if isinstance(exc, clicks):
            exc.show()
            sys.exit(exc.exit_code)
        raise
    sys.exit(result if isinstance(result, int) else 0)
