"""The consumer's reader schemas, checked against its handlers before it reads a record.

A handler registered for an (aggregate type, event type) decodes that event's Avro payloads into the
schema of that name. Without the file every such record would fail to decode, one dead letter at
a time, for a mistake in the deployment: so a missing schema is a configuration error found at
start-up (the consumer stops with exit code 1, names the missing file and dead-letters nothing).

Typed handlers (``event: Event[OrderPaid]``) are held to the same reader schemas here
(:mod:`postbox.payloads.check`): a payload class that cannot read its schema stops the consumer at
start-up too.

Apps that only read JSON outboxes (a stock Debezium outbox) pass ``App(require_schemas=False)``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from postbox.codec.avro import AvroCodec
from postbox.consumer.app import ANY
from postbox.errors import ConfigError, UnknownEventError
from postbox.resources import SCHEMAS_DIR_ENV, schemas_dir
from postbox.payloads.check import check_routes
from postbox.schemas.repository import EventSchema, SchemaRepository

if TYPE_CHECKING:
    from postbox.consumer.app import App
    from postbox.consumer.config import ConsumerConfig

log = logging.getLogger("postbox.consumer")


def load_reader_codec(app: "App", config: "ConsumerConfig") -> AvroCodec | None:
    """The codec the consumer decodes Avro with, or None for an app that reads JSON only.

    Raises :class:`ConfigError` when a handler's event has no schema (naming the file it expects),
    when the app's pinned reader version does not exist, or when the app needs schemas and no
    folder is configured.
    """
    needed = app.schema_requirements() if app.require_schemas else []
    try:
        folder = schemas_dir(config.schemas_dir)
    except ConfigError as exc:
        if needed:
            raise ConfigError(
                f"{exc.message}; the handlers of {app!r} decode {_labels(needed)} with it",
                fix=exc.fix,
            ) from None
        log.warning("no schema repository (%s): Avro records will be dead-lettered as DecodeError", exc.message)
        return None
    codec = checked_codec(app, folder)
    # the start-up line shows the setting (None when unset); this says which folder it resolved to
    log.info("event schemas: %d schema(s) in %s", len(codec.repository), folder)
    return codec


def checked_codec(app: "App", folder: Path) -> AvroCodec:
    """The codec of ``folder`` once ``app`` passes every start-up check against it (missing schema
    files, pinned reader versions, typed payload classes); ``postbox.testing`` runs it too."""
    repository = SchemaRepository.load(folder)
    _check_handlers(repository, folder, app.schema_requirements() if app.require_schemas else [])
    _check_reader_versions(repository, folder, app.reader_versions)
    check_routes(app.routes, reader_schema_lookup(repository, app.reader_versions), wildcard=ANY)
    return AvroCodec(repository)


def reader_schema_lookup(repository: SchemaRepository, pinned: dict[tuple[str, str], int]) -> Callable[[str, str], EventSchema | None]:
    """``(aggregate type, event type) -> the schema the consumer reads that event into`` (pinned or
    latest), None when the folder has none: what typed handlers are checked against."""

    def schema_for(aggregate_type: str, event_type: str) -> EventSchema | None:
        try:
            return repository.get(aggregate_type, event_type, pinned.get((aggregate_type, event_type)))
        except UnknownEventError:
            return None

    return schema_for


def _check_handlers(repository: SchemaRepository, folder: Path, needed: list[tuple[str, str]]) -> None:
    known = set(repository.events())
    missing = [pair for pair in needed if pair not in known]
    if missing:
        files = ", ".join(str(folder / aggregate / f"{event}.v1.avsc") for aggregate, event in missing)
        raise ConfigError(
            f"handlers name event type(s) with no schema in {folder}: {_labels(missing)} (expected {files})",
            fix=f"add the schema file(s), point {SCHEMAS_DIR_ENV} / --schemas-dir at the folder that has them, "
            "or pass App(require_schemas=False) if these events arrive as JSON",
        )


def _check_reader_versions(repository: SchemaRepository, folder: Path, pinned: dict[tuple[str, str], int]) -> None:
    for (aggregate, event), version in sorted(pinned.items()):
        try:
            repository.get(aggregate, event, version)
        except UnknownEventError as exc:
            raise ConfigError(
                f"reader_versions pins {aggregate}/{event} v{version}, which {folder} does not have: {exc.message}",
                fix=f"add {folder / aggregate / f'{event}.v{version}.avsc'} or pin a version that exists",
            ) from None


def _labels(pairs: list[tuple[str, str]]) -> str:
    return ", ".join(f"{aggregate}/{event}" for aggregate, event in pairs)
