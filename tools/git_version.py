"""The version of a postbox build, from git: hatchling's ``code`` version source runs this file.

Why not a VCS plugin: setuptools-scm (behind hatch-vcs) needs a release tag in the clone, and a
clone of main may have none, where it says ``0.1.devN`` — older than the 0.1.0 already released.
Here the last release is the newest ``## X.Y.Z`` heading of CHANGELOG.md (a release renames
"Unreleased" to its version, then tags ``vX.Y.Z``):

* a commit tagged ``vX.Y.Z`` is ``X.Y.Z``;
* any other commit is the next minor version's ``.devN+g<sha>``: N counts the commits since the
  ``vX.Y.Z`` tag when the clone has it, else every commit of the history, so it grows along main
  and a newer build installs over an older one; a work tree with uncommitted changes adds ``.dirty``;
* without git metadata (an sdist, an exported tree): the version its PKG-INFO records, else
  ``<next>.dev0+unknown``.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RELEASE_HEADING = re.compile(r"^## \[?v?(\d+)\.(\d+)\.(\d+)\]?(?:\s|$)", re.MULTILINE)
TAG_PATTERN = "v[0-9]*.[0-9]*.[0-9]*"


def last_release(root: Path = ROOT) -> tuple[int, int, int]:
    """The newest released version CHANGELOG.md names (0.0.0 when it names none)."""
    changelog = root / "CHANGELOG.md"
    found = RELEASE_HEADING.search(changelog.read_text(encoding="utf-8")) if changelog.is_file() else None
    return (int(found[1]), int(found[2]), int(found[3])) if found else (0, 0, 0)


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _from_pkg_info(root: Path) -> str | None:
    pkg_info = root / "PKG-INFO"
    if not pkg_info.is_file():
        return None
    found = re.search(r"^Version: (\S+)$", pkg_info.read_text(encoding="utf-8"), re.MULTILINE)
    return found[1] if found else None


def version(root: Path = ROOT) -> str:
    """The version of the tree at ``root`` (see the module's docstring)."""
    major, minor, patch = last_release(root)
    upcoming = f"{major}.{minor + 1}.0"
    sha = _git(root, "rev-parse", "--short=9", "HEAD") if (root / ".git").exists() else None
    if sha is None:
        return _from_pkg_info(root) or f"{upcoming}.dev0+unknown"
    exact = _git(root, "describe", "--tags", "--exact-match", "--match", TAG_PATTERN, "HEAD")
    dirty = bool(_git(root, "status", "--porcelain", "--untracked-files=no"))
    if exact and not dirty:
        return exact.removeprefix("v")
    tag = f"v{major}.{minor}.{patch}"
    since = f"{tag}..HEAD" if _git(root, "rev-parse", "--verify", "--quiet", f"refs/tags/{tag}") else "HEAD"
    distance = _git(root, "rev-list", "--count", since) or "0"
    return f"{upcoming}.dev{distance}+g{sha}" + (".dirty" if dirty else "")


if __name__ == "__main__":  # `python tools/git_version.py`: what a build of this tree would be
    print(version())
