"""The schema repository: every event's Avro schemas, loaded from the ``schemas/`` folder.

Layout (the folder is the source of truth)::

    <schemas folder>/<aggregate_type>/<EventType>.v<N>.avsc

The folder is the user's, named by a setting (``POSTBOX_SCHEMAS_DIR``, see
:func:`postbox.resources.schemas_dir`).

The record's name must be the event type; versions of one event live side by side. The
repository indexes schemas by (aggregate type, event type, version) for writers, which encode
with the latest version unless told otherwise, and by fingerprint for readers, which learn the
writer schema from the bytes themselves.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastavro import parse_schema

from postbox.errors import SchemaError, UnknownEventError
from postbox.schemas.fingerprint import canonical_form, fingerprint_of_canonical

FILE_PATTERN = re.compile(r"^(?P<event>[A-Za-z_][A-Za-z0-9_]*)\.v(?P<version>[1-9][0-9]*)\.avsc$")
#: Aggregate types become Kafka topic names (outbox.event.<aggregate_type>): keep them to the
#: characters a topic name allows, minus the dot (a separator in the topic name).
AGGREGATE_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,200}$")
#: Folders of a schemas folder that hold no event schemas (postbox's own checkout kept its SQL there).
NON_EVENT_DIRS = frozenset({"sql"})


@dataclass(frozen=True)
class EventSchema:
    """One version of one event's schema."""

    aggregate_type: str
    event_type: str
    version: int
    path: Path | None
    raw: dict[str, Any] = field(repr=False, compare=False)
    parsed: Any = field(repr=False, compare=False)
    names: dict[str, Any] = field(repr=False, compare=False)  # full name -> parsed named type
    canonical: str = field(repr=False)
    fingerprint: bytes

    @property
    def fingerprint_hex(self) -> str:
        return self.fingerprint.hex()

    @property
    def label(self) -> str:
        """How errors and reports name this schema: ``order/OrderPlaced v2``."""
        return f"{self.aggregate_type}/{self.event_type} v{self.version}"

    @property
    def field_names(self) -> list[str]:
        return [f["name"] for f in self.raw.get("fields", [])]

    @classmethod
    def from_json(
        cls, aggregate_type: str, event_type: str, version: int, raw: dict[str, Any], path: Path | None = None
    ) -> "EventSchema":
        """Parse one schema; SchemaError names the file (or event) and what is wrong."""
        where = str(path) if path else f"{aggregate_type}/{event_type} v{version}"
        if not isinstance(raw, dict) or raw.get("type") != "record":
            raise SchemaError(f"{where}: an event schema must be an Avro record", fix='use {"type": "record", ...}')
        if raw.get("name", "").rsplit(".", 1)[-1] != event_type:
            raise SchemaError(
                f"{where}: the record is named {raw.get('name')!r} but the file is for event type {event_type!r}",
                fix=f'name the record "{event_type}" or rename the file',
            )
        names: dict[str, Any] = {}
        try:
            parsed = parse_schema(raw, named_schemas=names)
        except Exception as exc:  # fastavro raises SchemaParseException, ValueError, TypeError...
            raise SchemaError(f"{where}: not a valid Avro schema: {exc}") from exc
        canonical = canonical_form(parsed)
        return cls(
            aggregate_type=aggregate_type,
            event_type=event_type,
            version=version,
            path=path,
            raw=raw,
            parsed=parsed,
            names=names,
            canonical=canonical,
            fingerprint=fingerprint_of_canonical(canonical),
        )


@dataclass
class ScanResult:
    """What a folder scan found: the schemas that loaded, and a line per file that did not."""

    schemas: list[EventSchema]
    problems: list[str]


def scan(directory: Path) -> ScanResult:
    """Load every ``<aggregate>/<Event>.v<N>.avsc`` under ``directory``, collecting problems."""
    directory = Path(directory)
    if not directory.is_dir():
        raise SchemaError(f"schema folder {directory} does not exist", fix="pass --dir or set POSTBOX_SCHEMAS_DIR")
    schemas: list[EventSchema] = []
    problems: list[str] = []
    for agg_dir in sorted(p for p in directory.iterdir() if p.is_dir() and p.name not in NON_EVENT_DIRS):
        if agg_dir.name.startswith("."):
            continue
        if not AGGREGATE_PATTERN.match(agg_dir.name):
            problems.append(f"{agg_dir}: {agg_dir.name!r} cannot be an aggregate type (letters, digits, _ and - only)")
            continue
        for path in sorted(agg_dir.iterdir()):
            loaded = _load_file(agg_dir.name, path)
            if isinstance(loaded, EventSchema):
                schemas.append(loaded)
            elif loaded is not None:
                problems.append(loaded)
    return ScanResult(schemas, problems)


def _load_file(aggregate_type: str, path: Path) -> EventSchema | str | None:
    """One file of an aggregate's folder: its schema, the problem line that says why it did not
    load, or None for a file that is not meant to be a schema (hidden, a folder, not ``.avsc``)."""
    if path.name.startswith(".") or path.is_dir():
        return None
    match = FILE_PATTERN.match(path.name)
    if not match:
        if path.suffix == ".avsc":
            return f"{path}: name it <EventType>.v<N>.avsc (e.g. OrderPlaced.v1.avsc)"
        return None
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"{path}: not readable JSON: {exc}"
    try:
        return EventSchema.from_json(aggregate_type, match["event"], int(match["version"]), raw, path)
    except SchemaError as exc:
        return exc.message


class SchemaRepository:
    """Event schemas indexed by (aggregate type, event type, version) and by fingerprint."""

    def __init__(self, schemas: Iterable[EventSchema]) -> None:
        self._by_key: dict[tuple[str, str, int], EventSchema] = {}
        self._versions: dict[tuple[str, str], list[EventSchema]] = {}
        self._by_fingerprint: dict[bytes, EventSchema] = {}
        self._by_event: dict[str, list[str]] = {}
        for schema in sorted(schemas, key=lambda s: (s.aggregate_type, s.event_type, s.version)):
            key = (schema.aggregate_type, schema.event_type, schema.version)
            if key in self._by_key:
                raise SchemaError(f"{schema.label} is defined twice ({self._by_key[key].path} and {schema.path})")
            self._by_key[key] = schema
            self._versions.setdefault((schema.aggregate_type, schema.event_type), []).append(schema)
            # Versions that differ only in docs or defaults share a canonical form and so a
            # fingerprint; they decode identically, and the first (oldest) one is indexed.
            self._by_fingerprint.setdefault(schema.fingerprint, schema)
            aggregates = self._by_event.setdefault(schema.event_type, [])
            if schema.aggregate_type not in aggregates:
                aggregates.append(schema.aggregate_type)

    @classmethod
    def load(cls, directory: Path | str) -> "SchemaRepository":
        """Load a folder; SchemaError listing every problem if any file cannot be used."""
        result = scan(Path(directory))
        if result.problems:
            listing = "\n  ".join(result.problems)
            raise SchemaError(
                f"{len(result.problems)} schema problem(s) in {directory}:\n  {listing}",
                fix="run `postbox schemas check` for the full report",
            )
        return cls(result.schemas)

    @classmethod
    def default(cls) -> "SchemaRepository":
        """The configured schemas folder (``POSTBOX_SCHEMAS_DIR``, else ``./schemas``), loaded once
        per process and folder."""
        from postbox.resources import schemas_dir

        folder = schemas_dir()
        cached = _defaults.get(folder)
        if cached is None:
            cached = _defaults[folder] = cls.load(folder)
        return cached

    def __iter__(self) -> Iterator[EventSchema]:
        return iter(self._by_key.values())

    def __len__(self) -> int:
        return len(self._by_key)

    def events(self) -> list[tuple[str, str]]:
        """Every (aggregate type, event type), sorted."""
        return sorted(self._versions)

    def versions(self, aggregate_type: str, event_type: str) -> list[EventSchema]:
        """All versions of one event, oldest first."""
        try:
            return list(self._versions[(aggregate_type, event_type)])
        except KeyError:
            raise self._unknown(aggregate_type, event_type) from None

    def get(self, aggregate_type: str, event_type: str, version: int | None = None) -> EventSchema:
        """One version of an event's schema (the latest when ``version`` is None)."""
        versions = self._versions.get((aggregate_type, event_type))
        if not versions:
            raise self._unknown(aggregate_type, event_type)
        if version is None:
            return versions[-1]
        schema = self._by_key.get((aggregate_type, event_type, version))
        if schema is None:
            known = ", ".join(f"v{s.version}" for s in versions)
            raise UnknownEventError(
                f"{aggregate_type}/{event_type} has no version {version} (known: {known})",
                fix=f"add schemas/{aggregate_type}/{event_type}.v{version}.avsc or use a known version",
            )
        return schema

    def by_fingerprint(self, fingerprint: bytes) -> EventSchema | None:
        """The writer schema with this fingerprint, or None."""
        return self._by_fingerprint.get(bytes(fingerprint))

    def aggregates_of(self, event_type: str) -> list[str]:
        """The aggregate types that define ``event_type``."""
        return list(self._by_event.get(event_type, []))

    def _unknown(self, aggregate_type: str, event_type: str) -> UnknownEventError:
        elsewhere = self._by_event.get(event_type)
        if elsewhere:
            hint = f"{event_type} belongs to aggregate type(s) {', '.join(elsewhere)}"
        else:
            same = sorted(e for (a, e) in self._versions if a == aggregate_type)
            hint = f"known event types of {aggregate_type}: {', '.join(same)}" if same else (
                f"no schemas for aggregate type {aggregate_type!r}"
            )
        return UnknownEventError(
            f"unknown event type {event_type!r} for aggregate type {aggregate_type!r} ({hint})",
            fix=f"add schemas/{aggregate_type}/{event_type}.v1.avsc, or fix the name",
        )


_defaults: dict[Path, SchemaRepository] = {}
