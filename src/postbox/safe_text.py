"""Text any UTF-8 encoder accepts, whatever an event's data put in it.

A Python ``str`` may hold lone surrogates (``"\\ud83d"``): JSON allows the escape, JavaScript
writes one for a string cut inside an emoji, and ``json.loads`` keeps it. Such text raises
``UnicodeEncodeError`` wherever it is written as UTF-8 — a Redis command, a Kafka header, a log
line — so a handler error that quotes the event's data could stop the consumer. Everything that
writes a failure text or a log line passes it through :func:`safe_text`: each lone surrogate
becomes its escape (the six characters ``\\ud83d``), so nothing is lost and nothing raises.
"""

from __future__ import annotations


def safe_text(text: str) -> str:
    """``text`` with every lone surrogate written as its ``\\uXXXX`` escape (else unchanged)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text
