"""The code checks CI runs beside ruff and mypy (tools/complexity_check.py, tools/import_cycles.py):
each finds what it is for on a small package written here, and the library passes both."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _tool(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


complexity_check = _tool("complexity_check")
import_cycles = _tool("import_cycles")


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    package = tmp_path / "pkg"
    for name, source in {"__init__.py": "", **files}.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(source)
    return package


def test_an_import_circle_at_import_time_is_reported(tmp_path):
    package = _package(tmp_path, {"a.py": "from pkg import b\n", "b.py": "from . import c\n", "c.py": "import pkg.a\n", "d.py": "import pkg.a\n"})
    assert import_cycles.cycles(import_cycles.graph(package)) == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]
    assert import_cycles.main([str(package)]) == 1


def test_imports_in_functions_and_under_type_checking_make_no_circle(tmp_path):
    package = _package(
        tmp_path,
        {
            "a.py": "from typing import TYPE_CHECKING\nimport pkg.b\n",
            "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n\ndef f():\n    from pkg import a\n",
        },
    )
    assert import_cycles.cycles(import_cycles.graph(package)) == []
    assert import_cycles.main([str(package)]) == 0


def _function(branches: int) -> str:
    return "def f(x):\n" + "".join(f"    if x == {i}:\n        return {i}\n" for i in range(branches)) + "    return -1\n"


def test_a_function_at_the_limit_is_an_offender(tmp_path):
    package = _package(tmp_path, {"low.py": _function(13), "high.py": _function(14)})
    found = complexity_check.offenders(package, root=tmp_path)
    assert found == {("pkg/high.py", "f"): (1, 15)}
    assert complexity_check.problems(found, set()) == ["pkg/high.py:1 f 15"]


def test_the_allow_list_only_shrinks(tmp_path):
    package = _package(tmp_path, {"high.py": _function(14)})
    found = complexity_check.offenders(package, root=tmp_path)
    assert complexity_check.problems(found, {("pkg/high.py", "f")}) == []
    stale = complexity_check.problems({}, {("pkg/high.py", "f")})
    assert len(stale) == 1 and stale[0].startswith("pkg/high.py f: allow-listed but below 15")


def test_the_library_passes_both_checks():
    assert import_cycles.main([]) == 0
    assert complexity_check.main([]) == 0
