"""Command lines for the stack's two JVMs (broker and Connect worker).

Heaps are sized for a small shared machine (2 cores); POSTBOX_KAFKA_HEAP / POSTBOX_CONNECT_HEAP
override them. G1 with a short pause goal keeps the latency tail low.
"""

from __future__ import annotations

import os
from pathlib import Path

from postbox.stack.checkout import infra_dir


def java_command(java: Path, heap_var: str, heap_default: str, classpath: str, main: str, *args: str) -> list[str]:
    heap = os.environ.get(heap_var, heap_default)
    return [
        str(java),
        f"-Xms{min_heap(heap)}",
        f"-Xmx{heap}",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-XX:+ExitOnOutOfMemoryError",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={infra_dir() / 'local' / 'log4j2.properties'}",
        "-cp",
        classpath,
        main,
        *args,
    ]


def min_heap(heap: str) -> str:
    """Start at a quarter of the maximum: quick start, room to grow."""
    units = {"g": 1024, "m": 1}
    suffix = heap[-1].lower()
    if suffix in units and heap[:-1].isdigit():
        return f"{max(64, int(heap[:-1]) * units[suffix] // 4)}m"
    return heap
