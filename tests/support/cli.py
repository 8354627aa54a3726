"""`postbox` commands run inside the test process (typer's CliRunner): the same command functions
as the console script, without a new interpreter per call (about a second saved each on a busy
2-core machine). For the success paths; tests of error output and exit codes of failures run the
real process (``tests.integration.incident_support.run_cli``), where ``main()`` prints them."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

import typer
from typer.testing import CliRunner


@lru_cache(maxsize=1)
def _app() -> typer.Typer:
    from postbox.cli import _register, app

    _register()
    return app


def invoke(*args: str) -> tuple[int, str]:
    """(exit code the console script would return, stdout); raises what the command raised."""
    result = CliRunner().invoke(_app(), list(args), standalone_mode=False, catch_exceptions=False,
                                env={"COLUMNS": "200"})
    code = result.return_value if isinstance(result.return_value, int) else result.exit_code
    return code, result.stdout


def invoke_json(*args: str, expect: int = 0) -> Any:
    code, out = invoke(*args, "--json")
    assert code == expect, f"postbox {' '.join(args)} → {code}, expected {expect}\n{out[-3000:]}"
    return json.loads(out)
