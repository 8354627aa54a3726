"""#15.2 layers: the library never imports the local stack (`postbox.stack`) nor the CLI.

DESIGN.md, Layout: "`stack/` is a leaf that only the CLI, the demo, benches and tests use; the CLI
hands the stack's addresses to the settings". Read from the source (every ``import`` statement of
every module under ``src/postbox``, function-level ones included, relative ones resolved), so a
lazy ``from postbox.stack.layout import ...`` inside a function counts as much as a top-level one.
Shown to fail before #15.2: it named settings.py, effects/durability.py, incident/trace.py
(the state folder) and incident/progress.py (``postbox.cli.output``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "postbox"

#: Who may import the local stack: the command line, the demo, the test harness, the stack itself.
STACK_USERS = ("postbox.cli", "postbox.demo", "postbox.testing", "postbox.stack")
#: Who may import the command line: itself, the console script's entry point, the package's ``__main__`` and the demo it starts.
CLI_USERS = ("postbox.cli", "postbox.console", "postbox.__main__", "postbox.demo")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(source: str, module: str, is_package: bool = False) -> set[str]:
    """Every module name the source of ``module`` imports (``from a import b`` counts as ``a`` and
    ``a.b``), relative imports resolved against its package."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def violations(target: str, allowed: tuple[str, ...]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        if within(name, allowed):
            continue
        names = imported(path.read_text(), name, is_package=path.name == "__init__.py")
        bad = sorted(i for i in names if within(i, (target,)))
        if bad:
            found[str(path.relative_to(PACKAGE))] = bad
    return found


def test_the_import_reader_sees_lazy_and_relative_imports():
    """The check itself: an import inside a function and a relative one are both found."""
    lazy = "def f():\n    from postbox.stack.layout import default_state_dir\n"
    relative = "def f():\n    from ..stack import secrets\n    from . import lag\n"
    assert "postbox.stack.layout" in imported(lazy, "postbox.settings")
    found = imported(relative, "postbox.incident.trace")
    assert {"postbox.stack", "postbox.stack.secrets", "postbox.incident.lag"} <= found
    assert within("postbox.stack.secrets", ("postbox.stack",)) and not within("postbox.stacked", ("postbox.stack",))


@pytest.mark.parametrize(("target", "allowed"), [("postbox.stack", STACK_USERS), ("postbox.cli", CLI_USERS)])
def test_the_library_imports_neither_the_local_stack_nor_the_cli(target, allowed):
    assert violations(target, allowed) == {}, f"modules outside {allowed} import {target}"
