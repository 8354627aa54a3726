"""Fails when a function or method of the library is at radon cyclomatic complexity 15 or more.

Measured with radon itself (ruff's mccabe rule counts fewer branches: boolean operators and
comprehensions are free there), so the limit the project states is the one CI holds. Functions
still due for a split are listed in tools/complexity_allowlist.txt, one ``path name`` a line;
the check also fails on a listed function that is no longer over the limit, so the list only
shrinks.

    python tools/complexity_check.py [source folder]   (default: src/postbox)
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

from radon.complexity import cc_visit
from radon.visitors import Class, Function

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 15
ALLOWLIST = ROOT / "tools" / "complexity_allowlist.txt"


def functions(blocks: list[Function | Class]) -> Iterator[Function]:
    """Every function and method radon measured (a class's own score is its methods' average)."""
    for block in blocks:
        if isinstance(block, Class):
            yield from block.methods
        else:
            yield block


def offenders(source: Path, root: Path = ROOT) -> dict[tuple[str, str], tuple[int, int]]:
    """(path, name) -> (line, complexity) of every function at the limit or above."""
    found: dict[tuple[str, str], tuple[int, int]] = {}
    for path in sorted(source.rglob("*.py")):
        relative = path.resolve().relative_to(root).as_posix()
        for function in functions(cc_visit(path.read_text(encoding="utf-8"))):
            if function.complexity >= LIMIT:
                found[(relative, function.fullname)] = (function.lineno, function.complexity)
    return found


def read_allowlist(path: Path) -> set[tuple[str, str]]:
    """The ``path name`` pairs of the allow-list (blank lines and ``#`` comments skipped)."""
    if not path.is_file():
        return set()
    entries: set[tuple[str, str]] = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            file, name = line.split()
            entries.add((file, name))
    return entries


def problems(found: dict[tuple[str, str], tuple[int, int]], allowed: set[tuple[str, str]]) -> list[str]:
    """One line per new offender and per allow-listed function that is no longer over the limit."""
    lines = [f"{file}:{line} {name} {complexity}" for (file, name), (line, complexity) in sorted(found.items()) if (file, name) not in allowed]
    lines += [f"{file} {name}: allow-listed but below {LIMIT} now (or gone); remove it from {ALLOWLIST.relative_to(ROOT)}" for file, name in sorted(allowed - found.keys())]
    return lines


def main(argv: list[str]) -> int:
    source = Path(argv[0]) if argv else ROOT / "src" / "postbox"
    report = problems(offenders(source), read_allowlist(ALLOWLIST))
    for line in report:
        print(line)
    if report:
        print(f"radon complexity: {len(report)} problem(s); split a function at {LIMIT} or more into named helpers", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
