"""Printing helpers shared by every command: rich tables for people, stable JSON for scripts."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape

from postbox.errors import PostboxError

console = Console()
err_console = Console(stderr=True)


def print_json(data: Any) -> None:
    """One JSON document on stdout (sorted keys: a stable shape for scripts)."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def print_error(exc: PostboxError) -> None:
    """One line naming what went wrong, then the fix when there is one."""
    err_console.print(f"[bold red]error:[/] {escape(exc.message)}", highlight=False, markup=True, soft_wrap=True)
    if exc.fix:
        err_console.print(f"  [bold]fix:[/] {escape(exc.fix)}", highlight=False, soft_wrap=True)
