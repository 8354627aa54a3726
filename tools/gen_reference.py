"""Generate the parts of the reference pages that come from the code itself.

- ``docs/cli.md``: every command and subcommand of ``postbox``, its help, each option with its
  default and environment variable, read from the typer/click command tree.
- ``docs/configuration.md``: the consumer's table (between the ``generated: consumer`` markers),
  one row per :class:`postbox.consumer.ConsumerConfig` field with its flag, variable and default;
  the rest of the page is written by hand and held to the code by tests/unit/test_reference_docs.py.

Run ``python tools/gen_reference.py`` after changing a command, a flag or a consumer setting;
``--check`` exits 1 naming the stale page instead of writing it.
"""

from __future__ import annotations

import os
import sys
from dataclasses import MISSING, fields
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CLI_PAGE = ROOT / "docs" / "cli.md"
CONFIG_PAGE = ROOT / "docs" / "configuration.md"
BEGIN, END = "<!-- generated: consumer (python tools/gen_reference.py) -->", "<!-- end generated: consumer -->"


def _cell(text: str) -> str:
    """One table cell: one line, reST roles and double backquotes as Markdown code."""
    import re

    text = re.sub(r":(?:func|mod|class|data|meth):`([^`]+)`", r"`\1`", " ".join(str(text).split()))
    return text.replace("``", "`").replace("|", "\\|")


def _default(value: Any) -> str:
    if value is None or value == () or value == "":
        return ""
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, timedelta):
        seconds = int(value.total_seconds())
        return f"`{seconds // 86400}d`" if seconds % 86400 == 0 else f"`{seconds}s`"
    return f"`{value}`"


def _click_root() -> Any:
    import typer

    from postbox.cli import _register, app

    _register(["--help"])
    return typer.main.get_command(app)


def _option_row(param: Any) -> str | None:
    if getattr(param, "hidden", False) or param.param_type_name == "argument":
        return None
    names = ", ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
    envvar = param.envvar if isinstance(param.envvar, str) else ", ".join(param.envvar or ())
    default = "" if param.is_flag and not param.default else _default(param.default)
    if param.is_flag and param.default:
        default = "on"
    return f"| {names} | {_cell(default)} | {f'`{envvar}`' if envvar else ''} | {_cell(param.help or '')} |"


def _command_section(command: Any, path: list[str], out: list[str]) -> None:
    name = " ".join(path)
    level = "#" * min(len(path) + 1, 4)
    out += [f"{level} `{name}`", ""]
    help_text = (command.help or command.short_help or "").strip()
    if help_text:
        out += [help_text.split("\n\n")[0].strip(), ""]
    arguments = [p for p in command.params if p.param_type_name == "argument"]
    usage = " ".join([name, *(f"{(p.metavar or p.name.upper())}{'...' if p.nargs == -1 else ''}" for p in arguments)])
    out += ["```text", f"{usage}{' [OPTIONS]' if any(p.param_type_name == 'option' for p in command.params) else ''}", "```", ""]
    rows = [row for row in (_option_row(p) for p in command.params) if row]
    if rows:
        out += ["| option | default | variable | meaning |", "|---|---|---|---|", *rows, ""]
    if hasattr(command, "commands"):  # a group (typer vendors click: no click import)
        for sub_name in sorted(command.commands):
            sub = command.commands[sub_name]
            if not getattr(sub, "hidden", False):
                _command_section(sub, [*path, sub_name], out)


def cli_page() -> str:
    out = ["# Command-line reference", "",
           "Every `postbox` command with its options, generated from the commands themselves by",
           "`python tools/gen_reference.py` (a test fails when this page is stale). The guides say when",
           "to use which: [incident.md](incident.md), [consumer.md](consumer.md), the README.", ""]  # fmt: skip
    _command_section(_click_root(), ["postbox"], out)
    return "\n".join(out).rstrip() + "\n"


def _field_docs(cls: type) -> dict[str, str]:
    """The ``#:`` comment lines above each field of a dataclass (its documentation in the source)."""
    import inspect
    import re

    docs: dict[str, str] = {}
    pending: list[str] = []
    for line in inspect.getsource(cls).splitlines():
        text = line.strip()
        if text.startswith("#:"):
            pending.append(text[2:].strip())
            continue
        match = re.match(r"(\w+): ", text)
        if match and pending:
            docs[match.group(1)] = " ".join(pending)
        pending = [] if not text.startswith("#") else pending
    return docs


def consumer_table() -> str:
    from postbox.consumer.config import ConsumerConfig, env_name, flag_name

    options = {p.name: p for p in _click_root().commands["consume"].params}
    docs = _field_docs(ConsumerConfig)
    rows = ["| flag | variable | default | meaning |", "|---|---|---|---|"]
    for f in fields(ConsumerConfig):
        if f.name in ("sources", "kafka_properties"):
            continue
        default = f.default if f.default is not MISSING else None
        option = options.get(f.name)
        flag = f"`{flag_name(f.name)}`" if option is not None else ""
        meaning = docs.get(f.name) or (option.help if option is not None else "")
        rows.append(f"| {flag} | `{env_name(f.name)}` | {_cell(_default(default))} | {_cell(meaning or '')} |")
    return "\n".join(rows)


def configuration_page(current: str) -> str:
    if BEGIN not in current or END not in current:
        raise SystemExit(f"{CONFIG_PAGE}: the markers {BEGIN!r} … {END!r} are missing")
    head, rest = current.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{consumer_table()}\n{END}{tail}"


def main(argv: list[str]) -> int:
    os.environ["COLUMNS"] = "100"  # help text never depends on the terminal
    pages = {CLI_PAGE: cli_page(), CONFIG_PAGE: configuration_page(CONFIG_PAGE.read_text())}
    stale = [path for path, text in pages.items() if not path.exists() or path.read_text() != text]
    if "--check" in argv:
        for path in stale:
            print(f"{path.relative_to(ROOT)} is stale: run python tools/gen_reference.py", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(pages[path])
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
