"""A test event turned into what the consumer would hand its handler in production.

Production never hands a handler a payload its schema refuses: postbox's writer refuses it at emit
(:class:`~postbox.errors.PayloadError` naming the field) and a JSON one is dead-lettered as
``SchemaMismatch``. An event built by hand in a test skips both, so a test could pass with a
payload production never delivers (a missing field, a misspelt key, an int where the handler will
get a ``datetime``). :mod:`postbox.testing` runs each test event through the same steps instead:
encoded with the writer schema (the latest version, as emit does), refused as emit refuses it, and
decoded into the reader schema the app reads (pinned or latest), so the handler gets exactly the
payload production gives it (timestamps as UTC datetimes, defaults filled). An app passes the
consumer's start-up checks first (:func:`~postbox.consumer.reader_schemas.checked_codec`: missing
schema files, typed payload classes). Events whose type has no schema are handed on as they are, as
a JSON event without schema is.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from postbox.codec.avro import AvroCodec
from postbox.errors import ConfigError, PayloadError, UnknownEventError
from postbox.events import Event
from postbox.payloads.instance import as_mapping
from postbox.resources import schemas_dir as find_schemas_dir
from postbox.schemas.repository import SchemaRepository

if TYPE_CHECKING:
    from postbox.consumer.app import App

#: ``schemas_dir=False``: hand test events on unchecked.
SchemasSetting = Path | str | Literal[False] | None


class SchemaGate:
    """Holds test events to the schemas of one folder (``folder`` None: no folder, events pass as they are)."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self.codec = AvroCodec(SchemaRepository.load(folder)) if folder is not None else None
        self._checked: set[int] = set()

    @classmethod
    def find(cls, setting: SchemasSetting, app: "App | None" = None) -> "SchemaGate":
        """``setting`` (a folder, or False for none), else the app's ``schemas_dir``, else
        ``POSTBOX_SCHEMAS_DIR``, else ``./schemas`` if it exists (as the consumer finds it)."""
        if setting is False:
            return cls(None)
        explicit = setting if setting is not None else (app.schemas_dir if app is not None else None)
        try:
            return cls(find_schemas_dir(explicit))
        except ConfigError:
            if explicit is not None:
                raise  # a folder named on purpose must exist
            return cls(None)

    def check_app(self, app: "App") -> None:
        """The consumer's start-up checks of ``app`` against this folder, once per app (ConfigError)."""
        if self.folder is None or id(app) in self._checked:
            return
        from postbox.consumer.reader_schemas import checked_codec

        checked_codec(app, self.folder)
        self._checked.add(id(app))

    def delivered(self, event: Event[Any], reader_version: int | None = None) -> Event[Any]:
        """``event`` with the payload production would deliver; PayloadError names what emit would refuse."""
        if self.codec is None:
            return event
        try:
            writer = self.codec.repository.get(event.aggregate_type, event.event_type)
        except UnknownEventError:
            return event
        payload = as_mapping(event.payload)
        try:
            value = self.codec.encode_with(writer, payload)
        except PayloadError as exc:
            raise PayloadError(
                f"test event {event.aggregate_type}/{event.event_type} (id {event.id}) would be refused in production: {exc.message}",
                event_type=exc.event_type, field=exc.field, value=exc.value, fix=exc.fix,
            ) from None
        decoded = self.codec.decode(value, reader_version=reader_version)
        return dataclasses.replace(event, payload=decoded.payload)
