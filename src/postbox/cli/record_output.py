"""One decoded Kafka record printed for people (`tail`, `dlq show`): head line, event, headers, payload."""

from __future__ import annotations

import json
from typing import Any

from rich.markup import escape

from postbox.cli.output import console

#: Headers already shown on the event line.
_EVENT_HEADERS = ("id", "event_type", "aggregate_type", "created_at")


def print_record(view: Any) -> None:
    """Print a :class:`postbox.incident.records.RecordView` as a few indented lines."""
    head = (f"[bold]{escape(view.topic)}[/] [cyan]p{view.partition}@{view.offset}[/]  {view.timestamp or '-'}"
            f"  key=[bold]{escape(str(view.key))}[/]" + (" (hex)" if view.key_encoding == "hex" else ""))
    meta = view.meta
    console.print(head, highlight=False)
    console.print(f"  event [green]{escape(str(meta.event_type))}[/] id={meta.event_id} created_at={meta.created_at}"
                  + (f" aggregate={meta.aggregate_type}" if meta.aggregate_type else ""), highlight=False)
    for h in view.headers:
        if h["key"] not in _EVENT_HEADERS and h["value"] is not None:
            console.print(f"  {escape(h['key'])}: {escape(str(h['value']))}" + (" (hex)" if h["encoding"] == "hex" else ""), highlight=False)
    if view.payload is not None:
        from postbox.incident.records import jsonable

        console.print(f"  [{view.encoding}] " + escape(json.dumps(jsonable(view.payload), ensure_ascii=False, sort_keys=True)), highlight=False)
    elif view.value_hex is not None:
        console.print(f"  [red]undecodable[/] ({escape(view.decode_error or '')}): {view.value_size} bytes hex {view.value_hex[:160]}", highlight=False)
    else:
        console.print("  (no value: tombstone)")
