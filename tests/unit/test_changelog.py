"""CHANGELOG.md is written for the people who upgrade postbox: what changed for them, sorted so the
changes that need action (Breaking) come first, without the project's issue numbers or its
measurements (those live in BENCHMARKS.md and docs/). The release headings are versions that
tools/git_version.py can read as the newest release."""

from __future__ import annotations

import re
from pathlib import Path

CHANGELOG = Path(__file__).resolve().parents[2] / "CHANGELOG.md"

#: The subsections a release may have, in the order they appear.
SUBSECTIONS = ("Breaking", "Added", "Changed", "Fixed")

#: `## X.Y.Z`, optionally with the release date docs/releasing.md asks for (`## 1.2.0 — 2027-01-31`).
RELEASE_HEADING = re.compile(r"## (0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?: [—-] \d{4}-\d{2}-\d{2})?")
ISSUE_REFERENCE = re.compile(r"#\d")
MEASUREMENT = re.compile(r"µs|\d\s?us\b|cachegrind|\binstructions\b", re.IGNORECASE)


def _lines() -> list[tuple[int, str]]:
    return list(enumerate(CHANGELOG.read_text(encoding="utf-8").splitlines(), start=1))


def _unreleased() -> list[tuple[int, str]]:
    """The lines of the ``## Unreleased`` section, heading excluded, with their line numbers."""
    lines = _lines()
    starts = [i for i, (_, line) in enumerate(lines) if line == "## Unreleased"]
    assert len(starts) == 1, "CHANGELOG.md needs exactly one '## Unreleased' heading"
    section = []
    for number, line in lines[starts[0] + 1:]:
        if line.startswith("## "):
            break
        section.append((number, line))
    return section


def test_unreleased_has_only_the_user_subsections_each_once_breaking_first():
    headings = [(n, line) for n, line in _unreleased() if line.startswith("#")]
    names = []
    for number, line in headings:
        name = line.removeprefix("### ")
        assert line.startswith("### ") and name in SUBSECTIONS, (
            f"CHANGELOG.md:{number}: {line!r} is not a subsection of a release; "
            f"use one of {', '.join('### ' + s for s in SUBSECTIONS)}")
        names.append(name)
    duplicates = sorted({name for name in names if names.count(name) > 1})
    assert not duplicates, f"CHANGELOG.md, Unreleased: '### {duplicates[0]}' appears more than once; merge its entries"
    expected = [s for s in SUBSECTIONS if s in names]
    assert names == expected, f"CHANGELOG.md, Unreleased: subsections {names}; put them in the order {expected}"


def test_the_changelog_names_no_issue_numbers():
    found = [f"CHANGELOG.md:{n}: {line.strip()}" for n, line in _lines() if ISSUE_REFERENCE.search(line)]
    assert not found, "issue references mean nothing to a user; describe the change instead:\n" + "\n".join(found)


def test_the_changelog_holds_no_measurements():
    found = [f"CHANGELOG.md:{n}: {line.strip()}" for n, line in _lines() if MEASUREMENT.search(line)]
    assert not found, "measurements belong in BENCHMARKS.md or docs/, not in the changelog:\n" + "\n".join(found)


def test_every_release_after_unreleased_is_a_version_newest_first():
    headings = [(n, line) for n, line in _lines() if line.startswith("## ")]
    assert headings and headings[0][1] == "## Unreleased", "the first '## ' heading of CHANGELOG.md is '## Unreleased'"
    versions = []
    for number, line in headings[1:]:
        found = RELEASE_HEADING.fullmatch(line)
        assert found, f"CHANGELOG.md:{number}: {line!r} is not a release heading; write '## X.Y.Z' (semver)"
        versions.append(tuple(int(part) for part in found.groups()))
    assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions), (
        f"CHANGELOG.md: releases {versions} are not newest first, each once (the build reads the first as the latest)")
