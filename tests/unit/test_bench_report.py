"""bench/report.py --only: re-running one benchmark replaces its section and keeps the others.

Before #17's fix, ``--only writer`` rewrote the whole generated block with the writer section
alone, dropping the effects, consumer and e2e figures (this test failed on that merge).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("bench_report", ROOT / "bench" / "report.py")
report = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
spec.loader.exec_module(report)  # type: ignore[union-attr]


def block(sections: dict[str, str], header: str) -> str:
    body = "".join(f"## {name}: {report.ABOUT[name]}\n\n{text}\n\n" for name, text in sections.items())
    return f"{report.BEGIN}\n\n# Benchmarks\n\n{header}\n\n{body}{report.END}\n"


def test_only_replaces_the_named_section_and_keeps_the_rest() -> None:
    old = {"writer": "old writer figures", "effects": "effects figures", "consumer": "consumer figures", "e2e": "e2e figures"}
    existing = "intro kept\n\n" + block(old, "old header") + "\n# Benchmarks\n\n## Faults\n\nfault figures\n"
    generated = block({"writer": "new writer figures"}, "new header")

    merged = report.merge(existing, generated, ("writer",))

    assert "new writer figures" in merged and "old writer figures" not in merged
    for kept in ("effects figures", "consumer figures", "e2e figures", "old header", "intro kept", "fault figures"):
        assert kept in merged, kept
    assert merged.index("new writer figures") < merged.index("effects figures")  # in its place
    assert merged.count(report.BEGIN) == merged.count(report.END) == 1


def test_full_run_replaces_the_whole_block_and_keeps_what_is_outside() -> None:
    existing = block({"writer": "old", "effects": "old effects"}, "old header") + "## Faults\n\nkept\n"
    generated = block({"writer": "new", "effects": "new effects"}, "new header")
    merged = report.merge(existing, generated)
    assert "old" not in merged.split(report.END)[0] and "kept" in merged
