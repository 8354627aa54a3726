"""The demo's output: a rich live table on a terminal, one plain line every few seconds otherwise
(CI logs), and the final verdict with its summary table."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

STAGES = ("inventory", "payment", "shipping")


@dataclass
class Snapshot:
    """Everything one refresh shows."""

    elapsed: float = 0.0
    phase: str = "starting"
    orders_target: int = 0
    placed: int = 0
    cancelled: int = 0
    place_rate: float = 0.0
    kafka_total: int = 0
    kafka_rate: float = 0.0
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)   # applied, rate, lag, duplicates, dead, latency
    ready: int = 0
    ready_rate: float = 0.0
    saga_latency: dict[str, float | None] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)                   # chaos and phase notes


def fmt_s(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def fmt_n(value: float | int | None) -> str:
    return "–" if value is None else f"{int(value):,}"


def render(s: Snapshot, title: str) -> Group:
    table = Table(title=f"{title} · {s.phase} · {s.elapsed:5.1f} s", title_justify="left", box=None, pad_edge=False)
    for col, justify in (("stage", "left"), ("events", "right"), ("/s", "right"), ("lag", "right"),
                         ("dup skipped", "right"), ("dead letters", "right"), ("p50", "right"), ("p95", "right"), ("p99", "right")):
        table.add_column(col, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    table.add_row("order service (PostgreSQL + outbox)", f"{s.placed:,}/{s.orders_target:,}", f"{s.place_rate:,.0f}", "", "", "", "", "", "")
    table.add_row("Debezium → Kafka", fmt_n(s.kafka_total), f"{s.kafka_rate:,.0f}", "", "", "", "", "", "")
    for name in STAGES:
        g = s.groups.get(name, {})
        lat = g.get("latency", {})
        dead = g.get("dead", 0)
        table.add_row(
            f"{name} consumer", fmt_n(g.get("applied")), f"{g.get('rate', 0):,.0f}", fmt_n(g.get("lag")),
            fmt_n(g.get("duplicates")), Text(fmt_n(dead), style="red" if dead else ""),
            fmt_s(lat.get("p50")), fmt_s(lat.get("p95")), fmt_s(lat.get("p99")),
        )
    lat = s.saga_latency
    table.add_row(Text("ready to ship (placed → ready)", style="bold"), fmt_n(s.ready), f"{s.ready_rate:,.0f}", "", "", "",
                  fmt_s(lat.get("p50")), fmt_s(lat.get("p95")), fmt_s(lat.get("p99")))
    notes = Text("\n".join(s.events[-6:]), style="dim") if s.events else Text("")
    return Group(table, notes)


def plain_line(s: Snapshot) -> str:
    parts = [f"[{s.elapsed:6.1f}s] {s.phase}", f"placed {s.placed}/{s.orders_target} ({s.place_rate:.0f}/s)",
             f"kafka {s.kafka_total} ({s.kafka_rate:.0f}/s)"]
    for name in STAGES:
        g = s.groups.get(name, {})
        parts.append(f"{name} {int(g.get('applied', 0))} ({g.get('rate', 0):.0f}/s, lag {g.get('lag', '?')}, dup {int(g.get('duplicates', 0))}, dlq {int(g.get('dead', 0))})")
    lat = s.saga_latency
    parts.append(f"ready {s.ready} (p50 {fmt_s(lat.get('p50'))}, p95 {fmt_s(lat.get('p95'))}, p99 {fmt_s(lat.get('p99'))})")
    return " | ".join(parts)


class View:
    """``live=True``: a rich Live table refreshed in place; otherwise a plain line every
    ``interval`` seconds and each note (chaos, phase) as its own line."""

    def __init__(self, title: str, *, live: bool, stream: TextIO | None = None, interval: float = 2.0) -> None:
        self.title = title
        self.live = live
        self.stream = stream or sys.stdout
        self.interval = interval
        # Not a terminal (CI logs, a pipe): no colours, no cursor tricks, lines wide enough not to wrap.
        self.console = Console(file=self.stream, force_terminal=live or None, highlight=False,
                               width=None if live else 160, no_color=not live)
        self._live: Live | None = None
        self._last_line = 0.0
        self._notes_shown = 0

    def __enter__(self) -> "View":
        if self.live:
            self._live = Live(console=self.console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def update(self, snapshot: Snapshot, force: bool = False) -> None:
        if self._live is not None:
            self._live.update(render(snapshot, self.title))
            return
        for note in snapshot.events[self._notes_shown:]:
            self.stream.write(f"   {note}\n")
        self._notes_shown = len(snapshot.events)
        now = time.monotonic()
        if force or now - self._last_line >= self.interval:
            self._last_line = now
            self.stream.write(plain_line(snapshot) + "\n")
        self.stream.flush()

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None

    def note(self, text: str) -> None:
        """A line outside the live table (start-up steps)."""
        self.console.print(text, highlight=False, markup=False)


def final_report(console: Console, checks: list[Any], summary: list[tuple[str, str]], passed: bool) -> None:
    table = Table(title="invariants", title_justify="left", box=None, pad_edge=False)
    table.add_column("", no_wrap=True)
    table.add_column("check", no_wrap=True)
    table.add_column("detail")
    for c in checks:
        table.add_row(Text("PASS", style="green") if c.ok else Text("FAIL", style="bold red"), c.name, c.detail)
    console.print(table)
    summary_table = Table(title="summary", title_justify="left", box=None, pad_edge=False)
    summary_table.add_column("", no_wrap=True)
    summary_table.add_column("")
    for k, v in summary:
        summary_table.add_row(k, v)
    console.print(summary_table)
    broken = sum(not c.ok for c in checks)
    if passed:
        console.print(Text("verdict: PASS — every invariant holds", style="bold green"))
    else:
        console.print(Text(f"verdict: FAIL — {broken} invariant(s) broken" if broken else "verdict: FAIL", style="bold red"))
