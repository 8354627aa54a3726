"""A command line that names a command attaches that command's module alone (each other module's
imports cost every CLI process CPU, seconds on a loaded host); the table saying which module owns
which command must match what the modules register, or a command would vanish or answer "no such
command" when typed first."""

from __future__ import annotations

import subprocess
import sys

import pytest
import typer

from postbox.cli import COMMAND_MODULES, _command_modules


def _registered(module: object) -> list[str]:
    app = typer.Typer()
    module.register(app)  # type: ignore[attr-defined]  # every command module has register(app)
    commands = [c.name or c.callback.__name__ for c in app.registered_commands]  # type: ignore[union-attr]  # registered with a callback
    return commands + [g.name or g.typer_instance.info.name for g in app.registered_groups]  # type: ignore[union-attr, misc]  # a group has a Typer


def test_the_table_names_every_command_with_the_module_that_registers_it() -> None:
    every = _command_modules(["--help"])
    owners = {name: module.__name__.rsplit(".", 1)[-1] for module in every for name in _registered(module)}
    assert owners == COMMAND_MODULES


@pytest.mark.parametrize("command", sorted(COMMAND_MODULES))
def test_a_command_typed_first_attaches_its_own_module_only(command: str) -> None:
    (module,) = _command_modules([command, "--json"])
    assert command in _registered(module)


PROBE = """
import sys
from postbox.cli import main
sys.argv = ["postbox", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    code = exc.code
print("redis" in sys.modules, file=sys.stderr)
"""


def test_a_command_that_never_talks_to_redis_starts_without_importing_it() -> None:
    """`postbox topics --help`: redis-py's import (with its OpenTelemetry hooks) is ~0.3 s of CPU."""
    done = subprocess.run([sys.executable, "-c", PROBE, "topics", "--help"], capture_output=True, text=True, timeout=60)
    assert "Usage" in done.stdout and "topics" in done.stdout, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "False", done.stderr


def test_help_and_a_mistyped_command_still_see_every_command() -> None:
    helped = subprocess.run([sys.executable, "-c", PROBE, "--help"], capture_output=True, text=True, timeout=60)
    for command in COMMAND_MODULES:
        assert command in helped.stdout, command
    typo = subprocess.run([sys.executable, "-c", PROBE, "topic"], capture_output=True, text=True, timeout=60)
    assert "topics" in typo.stdout + typo.stderr  # the usage error lists or suggests the real one


@pytest.mark.parametrize("package", ["postbox.effects", "postbox.consumer"])
def test_the_lazy_packages_give_every_public_name_and_refuse_others(package: str) -> None:
    """``postbox.effects`` and ``postbox.consumer`` load their heavy modules on first use: every name
    of ``__all__`` is still there (and listed by ``dir()``), a misspelt one is an ImportError."""
    probe = f"""
import {package} as pkg
listed = set(dir(pkg))
missing = [n for n in pkg.__all__ if n not in listed or getattr(pkg, n) is None]
try:
    exec("from {package} import EffectEngine")
    refused = False
except ImportError:
    refused = True
print(missing, refused)
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[] True", done.stdout + done.stderr
