"""The statements the outbox code sends, read from ``outbox/sql/`` (SQL lives in .sql files)."""

from __future__ import annotations

from importlib import resources


def sql_text(name: str) -> str:
    """A statement from ``outbox/sql/`` without its comment lines (they would ride every Parse)."""
    text = resources.files("postbox.outbox").joinpath("sql").joinpath(name).read_text(encoding="utf-8")
    return " ".join(line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("--"))


__all__ = ["sql_text"]
