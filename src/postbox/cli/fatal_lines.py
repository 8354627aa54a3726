"""How a command's fatal error is written when its logs are JSON lines.

``postbox consume --log-format json`` (or ``POSTBOX_LOG_FORMAT=json``) promises one JSON object
per stderr line, which a cluster's log collector parses; the error that ends the process before
or after the loop (a configuration mistake, an app that fails to import, a usage error) is one of
those lines, in the runtime's own format (:class:`postbox.consumer.logs.JsonFormatter`), with the
fix and the exit code as fields. Every other command prints errors for a person
(:func:`postbox.cli.output.print_error`).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, Sequence

#: The commands whose ``--log-format`` also formats their fatal error.
COMMANDS_WITH_LOG_FORMAT = frozenset({"consume"})
FLAG = "--log-format"
ENV = "POSTBOX_LOG_FORMAT"


def json_requested(argv: Sequence[str], environ: Mapping[str, str]) -> bool:
    """Whether this command line asks for JSON log lines: read from the raw arguments, since a
    usage error comes before any option is parsed. The flag wins over the variable, as it does
    for the consumer's configuration."""
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    if command not in COMMANDS_WITH_LOG_FORMAT:
        return False
    chosen = environ.get(ENV)
    for index, arg in enumerate(argv):
        if arg == FLAG and index + 1 < len(argv):
            chosen = argv[index + 1]
        elif arg.startswith(FLAG + "="):
            chosen = arg.split("=", 1)[1]
    return (chosen or "").strip().lower() == "json"


def write(message: str, *, exit_code: int, fix: str | None = None, exc: BaseException | None = None) -> None:
    """One JSON line on stderr: level ``error``, logger ``postbox``, the message, then ``fix``,
    ``exit_code`` and, for an unexpected exception, its traceback as ``exc``."""
    from postbox.consumer.logs import json_line

    fields = {"exit_code": exit_code, **({"fix": fix} if fix else {})}
    sys.stderr.write(json_line("postbox", logging.ERROR, message, exc, **fields) + "\n")
    sys.stderr.flush()
