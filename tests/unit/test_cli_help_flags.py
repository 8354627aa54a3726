"""#15 CLI polish: boolean flags read as flags in every command's help (`--execute`, as kcat and
kafka-consumer-groups show them), never `--execute <bool>`; options that take a value keep their
type or metavar."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from tests.support.cli import _app


def _command_paths() -> Iterator[tuple[str, ...]]:
    """Every command and group of `postbox`, as the words that name it (the root is ())."""
    import typer

    click_root = typer.main.get_command(_app())

    def walk(command, path):
        yield path
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            yield from walk(sub, (*path, name))

    yield from walk(click_root, ())


PATHS = list(_command_paths())


def _help(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(_app(), [*path, "--help"], env={"COLUMNS": "250", "TERM": "dumb"})
    assert result.exit_code == 0, result.output
    return result.output


def test_the_walk_finds_the_commands():
    assert ("replay",) in PATHS and ("dlq", "replay") in PATHS and len(PATHS) > 20


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "postbox")
def test_no_flag_shows_a_type_in_help(path):
    assert "<bool>" not in _help(path)


def test_options_with_values_keep_their_type():
    text = _help(("replay",))
    execute = next(line for line in text.splitlines() if "--execute" in line and "Apply the plan" in line)
    assert execute.split("--execute", 1)[1].split("Apply", 1)[0].strip(" │") == ""
    assert any("--partition" in line and "<int" in line for line in text.splitlines())
    assert any("--app" in line and "MODULE:APP" in line for line in text.splitlines())


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "postbox")
def test_a_repeatable_option_shows_what_a_user_types(path):
    """A repeatable option showed `<list[int]>` (typer's name for the parameter's type); it shows
    what one occurrence takes (`-p PARTITION`, `--where FIELD=VALUE`), and says it repeats."""
    text = _help(path)
    assert "<list[" not in text
