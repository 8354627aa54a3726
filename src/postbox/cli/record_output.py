"""One decoded Kafka record printed for people (`tail`, `dlq show`): head line, event, headers, payload.

Everything that comes from the record (key, header names and values, the event's headers, the
payload) goes through :func:`postbox.incident.records.printable` and is escaped for rich markup:
escape sequences of a hostile or broken record show as ``\\x1b[2J`` instead of acting on the
terminal, and text like ``[bold]`` or the ``[avro]``/``[json]`` tag prints as written.
"""

from __future__ import annotations

import json
from typing import Any

from rich.markup import escape

from postbox.cli.output import console
from postbox.incident.records import jsonable, printable, utf8_text

#: Headers already shown on the event line.
_EVENT_HEADERS = ("id", "event_type", "aggregate_type", "created_at")


def safe(value: Any) -> str:
    """Record data as rich-markup-safe, terminal-safe text."""
    return escape(printable(value if isinstance(value, str) else str(value)))


def _readable(raw: Any, shown: Any, encoding: str) -> tuple[Any, str]:
    """A key as escaped UTF-8 text when it is UTF-8, else its hex with a note saying so."""
    if encoding == "hex":
        text = utf8_text(raw)
        return (text, "") if text is not None else (shown, " (hex)")
    return shown, ""


def print_record(view: Any) -> None:
    """Print a :class:`postbox.incident.records.RecordView` as a few indented lines."""
    key, key_note = _readable(view.raw_key, view.key, view.key_encoding)
    console.print(f"[bold]{safe(view.topic)}[/] [cyan]p{view.partition}@{view.offset}[/]  {view.timestamp or '-'}"
                  f"  key=[bold]{safe(key)}[/]{key_note}", highlight=False)
    meta = view.meta
    aggregate = f" aggregate={safe(meta.aggregate_type)}" if meta.aggregate_type else ""
    console.print(f"  event [green]{safe(meta.event_type)}[/] id={safe(meta.event_id)} created_at={safe(meta.created_at)}{aggregate}",
                  highlight=False)
    for h in view.headers:
        if h["key"] not in _EVENT_HEADERS and h["value"] is not None:
            shown = h["text"] if h["text"] != h["value"] else h["value"]
            hex_note = " (hex)" if h["encoding"] == "hex" and shown == h["value"] else ""
            console.print(f"  {safe(h['key'])}: {safe(shown)}{hex_note}", highlight=False)
    if view.payload is not None:
        text = json.dumps(jsonable(view.payload), ensure_ascii=False, sort_keys=True)
        console.print(f"  {escape('[' + view.encoding + ']')} {safe(text)}", highlight=False)
    elif view.value_hex is not None:
        console.print(f"  [red]undecodable[/] ({safe(view.decode_error or '')}): {view.value_size} bytes hex {view.value_hex[:160]}", highlight=False)
    else:
        console.print("  (no value: tombstone)")
