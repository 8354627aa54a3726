"""Printing helpers shared by every command: rich tables for people, plain text for pipes, stable
JSON for scripts.

Listing commands take ``--output table|json|tsv``. Without it a terminal gets a table and a pipe gets
TSV (a header line, then one line per row, full values: nothing cut or wrapped at 80 columns, so a
ref or fingerprint can be pasted into the next command). Every cell passes through
:func:`postbox.incident.records.printable`: bytes from Kafka records never reach the terminal raw.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from postbox.errors import PostboxError
from postbox.incident.records import printable

# soft_wrap: a long line is one line (the terminal wraps it); piped, nothing is cut at 80 columns.
console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)


class OutputFormat(str, Enum):
    """What a listing command prints."""

    table = "table"
    json = "json"
    tsv = "tsv"


OutputOpt = typer.Option(
    None, "--output", "-o", case_sensitive=False,
    help="table | json | tsv (default: table on a terminal, tsv when stdout is a pipe or file).",
)
JsonAliasOpt = typer.Option(False, "--json", help="Same as --output json (one JSON document, stable shape).")


def output_format(output: Optional[OutputFormat], json_flag: bool = False) -> OutputFormat:
    """The chosen format: ``--json`` or ``--output``, else by whether stdout is a terminal."""
    if json_flag:
        return OutputFormat.json
    if output is not None:
        return OutputFormat(output)
    return OutputFormat.table if sys.stdout.isatty() else OutputFormat.tsv


@dataclass
class Listing:
    """Rows of plain values under named columns; styles colour a whole row in the table form."""

    title: str
    columns: Sequence[str]
    rows: list[list[Any]] = field(default_factory=list)
    styles: list[Optional[str]] = field(default_factory=list)
    right: Sequence[str] = ()

    def add(self, *cells: Any, style: Optional[str] = None) -> None:
        self.rows.append(list(cells))
        self.styles.append(style)


#: Columns holding identifiers an engineer copies into the next command: never wrapped in a table.
_WHOLE = frozenset({"ref", "event id", "topic", "to", "dead-lettered", "at", "fingerprint"})


def print_listing(listing: Listing, fmt: OutputFormat) -> None:
    """The listing as a rich table (terminal) or TSV (header + rows, full values)."""
    if fmt is OutputFormat.tsv:
        sys.stdout.write("\t".join(listing.columns) + "\n")
        for row in listing.rows:
            sys.stdout.write("\t".join(_cell(v, fmt) for v in row) + "\n")
        sys.stdout.flush()
        return
    table = Table(title=Text(printable(listing.title)))
    for col in listing.columns:
        # identifiers stay whole (pasteable); free text (errors, notes) takes the squeeze
        table.add_column(col, justify="right" if col in listing.right else "left", overflow="fold", no_wrap=col in _WHOLE)
    for row, style in zip(listing.rows, listing.styles):
        table.add_row(*(Text(_cell(v, fmt)) for v in row), style=style)
    console.print(table)


def note(message: str, fmt: OutputFormat) -> None:
    """A sentence about the listing: under the table, or on stderr when stdout carries data."""
    target = console if fmt is OutputFormat.table else err_console
    target.print(escape(printable(message)), highlight=False)


def _cell(value: Any, fmt: OutputFormat) -> str:
    if value is None:
        return ""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}" if fmt is OutputFormat.table else str(value)
    return printable(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str, sort_keys=True))


def print_json(data: Any) -> None:
    """One JSON document on stdout (sorted keys: a stable shape for scripts)."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def print_error(exc: PostboxError) -> None:
    """One line naming what went wrong, then the fix when there is one."""
    err_console.print(f"[bold red]error:[/] {escape(_lines(exc.message))}", highlight=False, markup=True)
    if exc.fix:
        err_console.print(f"  [bold]fix:[/] {escape(_lines(exc.fix))}", highlight=False)


def _lines(text: str) -> str:
    """Terminal-safe text that keeps its line breaks and indentation (a message may quote what the
    user typed; a driver's hint is indented with a tab, which is harmless on a terminal)."""
    return "\n".join(printable(line.expandtabs(4)) for line in text.split("\n"))
