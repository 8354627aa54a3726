"""Fails when the modules of the library import each other in a circle.

A circle works only as long as every module in it reaches the others' names late enough, and
breaks on an unrelated reordering. Read from the source with ``ast``: the imports a module runs
when it is imported (its top level, including under ``try``/``if``), not those inside functions
nor under ``if TYPE_CHECKING:``, which never run at import. ``from a import b`` counts as an
import of the module ``a.b`` when that is a module, else of ``a``.

    python tools/import_cycles.py [package folder]   (default: src/postbox)
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def module_name(path: Path, package: Path) -> str:
    """The dotted name of the module at ``path`` within the package folder ``package``."""
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    """``if TYPE_CHECKING:`` or ``if typing.TYPE_CHECKING:``."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_time_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements that run when the module is imported: function and class bodies' imports excluded."""
    for node in body:
        if isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _import_time_statements(node.body)
            yield from _import_time_statements(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(handler.body for handler in node.handlers)):
                yield from _import_time_statements(block)
        elif isinstance(node, ast.With):
            yield from _import_time_statements(node.body)
        else:
            yield node


def imports(source: str, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``module`` imports at import time, relative imports resolved."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    found: set[str] = set()
    for node in _import_time_statements(ast.parse(source).body):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return (found & known) - {module}


def graph(package: Path) -> dict[str, set[str]]:
    """Module name -> the package's modules it imports at import time."""
    paths = {module_name(path, package): path for path in sorted(package.rglob("*.py"))}
    known = set(paths)
    return {name: imports(path.read_text(encoding="utf-8"), name, path.name == "__init__.py", known) for name, path in paths.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One circle per strongly connected group of modules (Tarjan), each as a path that closes on its start."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return [_circle(group, edges) for group in sorted(groups)]


def _circle(group: list[str], edges: dict[str, set[str]]) -> list[str]:
    """A shortest path from the group's first module back to itself through the group (breadth first)."""
    start, members = group[0], set(group)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for target in sorted(edges[node] & members):
                if target == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start] if len(path) > 1 else [start, node, start]
                if target not in came_from:
                    came_from[target] = node
                    following.append(target)
        frontier = following
    return [*group, start]


def main(argv: list[str]) -> int:
    package = Path(argv[0]) if argv else ROOT / "src" / "postbox"
    found = cycles(graph(package))
    for circle in found:
        print("import circle: " + " -> ".join(circle))
    if found:
        print(f"{len(found)} import circle(s) in {package}: move what both sides need into a leaf module, or import it inside the function that uses it", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
