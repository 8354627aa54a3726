"""Every page of docs/ is a page of its own: one ``# `` title on its first line, and none still
headed as a draft of a README section."""

from __future__ import annotations

from pathlib import Path

import pytest

DOCS = sorted((Path(__file__).resolve().parents[2] / "docs").glob("*.md"))


@pytest.mark.parametrize("page", DOCS, ids=[p.name for p in DOCS])
def test_a_docs_page_has_its_own_title(page):
    first = page.read_text().splitlines()[0]
    assert first.startswith("# "), f"{page.name}: the first line is not a title: {first!r}"
    assert "section text" not in first.lower() and "for the readme" not in first.lower(), f"{page.name}: {first!r}"
