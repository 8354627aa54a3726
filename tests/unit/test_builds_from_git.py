"""Builds are versioned from git (tools/git_version.py through hatchling's code source): two
wheels built from two commits carry two versions, and the newer installs over the older (the same
version everywhere was "Requirement already satisfied"). A clone without the release tag gives
the next minor version's ``.devN+g<sha>``; a tagged commit its tag; a tree without git metadata
something PEP 440 accepts. The wheels go into a venv with the base install only (no extras, as
``pip install postbox-cdc`` gives), where the ``postbox`` command names the extra to install, and
the library reads the connector template the wheel carries from the top-level ``connectors/``.

The project's build files are copied into a temporary repository (committed, so the test builds
what this tree would build, not its last commit)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
BUILD_FILES = ["pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md", "constraints.txt", "tools/git_version.py", "src/postbox", "connectors"]
GIT = ["git", "-c", "user.name=test", "-c", "user.email=test@example.invalid", "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false"]


def _run(*argv: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"{' '.join(map(str, argv))} → {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done.stdout


def _project(tmp: Path) -> Path:
    repo = tmp / "repo"
    for name in BUILD_FILES:
        source, target = ROOT / name, repo / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, target)
    _run(*GIT, "init", "--quiet", "-b", "main", cwd=repo)
    _run(*GIT, "add", "-A", cwd=repo)
    _run(*GIT, "commit", "--quiet", "-m", "first", cwd=repo)
    return repo


def _commit_a_change(repo: Path) -> None:
    (repo / "src/postbox/py.typed").write_text("# changed\n")
    _run(*GIT, "commit", "--quiet", "-am", "second", cwd=repo)


def _wheel(repo: Path, out: Path) -> Path:
    _run(sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", out, repo)
    (wheel,) = out.glob("*.whl")
    return wheel


def _version_of(repo: Path) -> str:
    return _run(sys.executable, repo / "tools/git_version.py").strip()


def _released() -> str:
    return re.search(r"^## (\d+\.\d+\.\d+)", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)[1]  # type: ignore[index]


def _next_minor(version: str) -> str:
    major, minor, _ = version.split(".")
    return f"{major}.{int(minor) + 1}.0"


@pytest.fixture(scope="module")
def two_wheels(tmp_path_factory) -> tuple[Path, Path]:
    """Wheels built from two consecutive commits of a repository without tags."""
    tmp = tmp_path_factory.mktemp("builds")
    repo = _project(tmp)
    first = _wheel(repo, tmp / "first")
    _commit_a_change(repo)
    return first, _wheel(repo, tmp / "second")


def _base_venv(tmp: Path) -> Path:
    """A venv with nothing but what the wheels bring (installed without dependencies: the command
    line's libraries, which only the extras bring, are then certainly absent)."""
    venv = tmp / "base"
    _run(sys.executable, "-m", "venv", "--without-pip", venv)
    return venv


def _pip_install(venv: Path, wheel: Path) -> str:
    return _run(sys.executable, "-m", "pip", "--python", venv / "bin/python", "install", "--no-deps", "--no-index",
                "--disable-pip-version-check", wheel)


def _installed(venv: Path) -> str:
    return _run(venv / "bin/python", "-c", "import postbox; print(postbox.__version__)", cwd=venv).strip()


def test_two_commits_build_two_versions_and_the_newer_installs_over_the_older(tmp_path, two_wheels):
    first, second = two_wheels
    upcoming = _next_minor(_released())
    first_version = first.name.split("-")[1]
    second_version = second.name.split("-")[1]
    assert re.fullmatch(rf"{re.escape(upcoming)}\.dev1\+g[0-9a-f]{{9}}", first_version), first.name
    assert re.fullmatch(rf"{re.escape(upcoming)}\.dev2\+g[0-9a-f]{{9}}", second_version), second.name
    assert Version(second_version) > Version(first_version) > Version(_released())

    venv = _base_venv(tmp_path)
    _pip_install(venv, first)
    assert _installed(venv) == first_version
    assert f"Successfully installed postbox-cdc-{second_version}" in _pip_install(venv, second)
    assert _installed(venv) == second_version


def test_without_the_cli_extra_the_command_names_the_extra_and_exits_2(tmp_path, two_wheels):
    venv = _base_venv(tmp_path)
    _pip_install(venv, two_wheels[1])
    done = subprocess.run([venv / "bin/postbox", "lag"], capture_output=True, text=True, timeout=60, cwd=venv)
    assert done.returncode == 2, done.stderr
    assert "pip install 'postbox-cdc[cli]'" in done.stderr
    assert "Traceback" not in done.stderr and "typer" in done.stderr
    module = subprocess.run([venv / "bin/python", "-m", "postbox", "--help"], capture_output=True, text=True, timeout=60, cwd=venv)
    assert module.returncode == 2 and "pip install 'postbox-cdc[cli]'" in module.stderr


def test_the_wheel_carries_the_top_level_connectors_folder_and_the_installed_library_reads_it(tmp_path, two_wheels):
    """The connector configuration lives in ``connectors/`` beside ``consumers/``, ``schemas/`` and
    ``infra/``, once: the wheel carries it as package data, and an installed library (outside any
    checkout) finds the template there."""
    import zipfile

    assert not (ROOT / "src" / "postbox" / "connectors").exists()
    with zipfile.ZipFile(two_wheels[1]) as wheel:
        carried = {name: wheel.read(name) for name in wheel.namelist() if name.startswith("postbox/connectors/")}
    assert carried == {f"postbox/connectors/{f.name}": f.read_bytes() for f in (ROOT / "connectors").glob("*.json")}
    venv = _base_venv(tmp_path)
    _pip_install(venv, two_wheels[1])
    where = _run(venv / "bin/python", "-c", "import json, postbox.resources as r; t = r.CONNECTOR_TEMPLATE; "
                 "print(t); print(json.loads(t.read_text())['name'])", cwd=venv).split()
    assert Path(where[0]).is_relative_to(venv) and where[1] == "postbox-outbox", where


def test_a_tagged_commit_is_its_release_and_the_next_commit_counts_from_the_tag(tmp_path):
    repo = _project(tmp_path)
    _run(*GIT, "tag", f"v{_released()}", cwd=repo)
    assert _version_of(repo) == _released()
    _commit_a_change(repo)
    assert re.fullmatch(rf"{re.escape(_next_minor(_released()))}\.dev1\+g[0-9a-f]{{9}}", _version_of(repo))
    (repo / "README.md").write_text("edited\n")
    assert _version_of(repo).endswith(".dirty")


def test_a_tree_without_git_metadata_has_a_valid_version(tmp_path):
    repo = _project(tmp_path)
    shutil.rmtree(repo / ".git")
    assert Version(_version_of(repo)) == Version(f"{_next_minor(_released())}.dev0+unknown")
    (repo / "PKG-INFO").write_text("Metadata-Version: 2.4\nName: postbox-cdc\nVersion: 0.2.0.dev7+gabc\n")
    assert _version_of(repo) == "0.2.0.dev7+gabc"


def test_the_wheel_carries_the_grant_sql_for_people_who_apply_their_own_migrations(two_wheels):
    import zipfile

    names = zipfile.ZipFile(two_wheels[1]).namelist()
    assert "postbox/sql/roles/grant_writer.sql" in names
    assert "postbox/sql/030_grants.sql" in names
