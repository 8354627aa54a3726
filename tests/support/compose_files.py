"""Compose files read as docker compose reads them, for tests that cannot run docker compose.

Why: an override file (``infra/docker-compose.replicas.yml``) means nothing alone; what runs is
the base file merged with it. This applies the Compose Specification's merge rules that our files
rely on (``compose-spec/13-merge.md``): mappings merge key by key, ``ports`` add up, ``volumes``
merge by container path, a sequence such as ``command`` is replaced, and the ``!reset`` /
``!override`` tags clear or replace what the base file set. The YAML tags are also why a plain
``yaml.safe_load`` cannot read an override file.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml


class _Reset:
    """``!reset``: the value goes, the base file's included."""


class _Override:
    """``!override``: this value replaces the base file's instead of merging with it."""

    def __init__(self, value: Any) -> None:
        self.value = value


class _Loader(yaml.SafeLoader):
    pass


def _construct_reset(loader: yaml.SafeLoader, node: yaml.Node) -> _Reset:
    return _Reset()


def _construct_override(loader: yaml.SafeLoader, node: yaml.Node) -> _Override:
    if isinstance(node, yaml.MappingNode):
        return _Override(loader.construct_mapping(node, deep=True))
    if isinstance(node, yaml.SequenceNode):
        return _Override(loader.construct_sequence(node, deep=True))
    return _Override(loader.construct_scalar(node))  # type: ignore[arg-type]


_Loader.add_constructor("!reset", _construct_reset)
_Loader.add_constructor("!override", _construct_override)


def load(path: Path) -> dict[str, Any]:
    """One compose file, its ``!reset`` / ``!override`` tags kept as markers for :func:`merge`."""
    return yaml.load(path.read_text(), Loader=_Loader) or {}  # noqa: S506 - a SafeLoader with two tags


def plain(path: Path) -> dict[str, Any]:
    """One compose file as the schema sees it: ``!reset`` as an empty value, ``!override`` as its value."""
    return _resolve(load(path))


def merged(*paths: Path) -> dict[str, Any]:
    """The files merged in order, as ``docker compose -f a -f b`` would run them."""
    result: dict[str, Any] = {}
    for path in paths:
        result = merge(result, load(path))
    return _resolve(result)


def merge(base: Any, override: Any, key: str | None = None) -> Any:
    if isinstance(override, _Reset):
        return _Reset()
    if isinstance(override, _Override):
        return copy.deepcopy(override.value)
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for k, v in override.items():
            out[k] = merge(base[k], v, k) if k in base else v
        return out
    if key == "depends_on":
        return merge(_as_mapping(base), _as_mapping(override))
    if isinstance(base, list) and isinstance(override, list):
        if key == "ports":
            return base + [p for p in override if p not in base]
        if key == "volumes":
            targets = {_target(v) for v in override}
            return [v for v in base if _target(v) not in targets] + list(override)
    return override


def _as_mapping(depends_on: Any) -> dict[str, Any]:
    """``depends_on`` as a list is short for each service with ``condition: service_started``."""
    if isinstance(depends_on, list):
        return {name: {"condition": "service_started"} for name in depends_on}
    return dict(depends_on)


def _target(volume: Any) -> str:
    return volume["target"] if isinstance(volume, dict) else str(volume).split(":")[1]


def _resolve(value: Any) -> Any:
    if isinstance(value, _Override):
        return _resolve(value.value)
    if isinstance(value, dict):
        return {k: _resolve(v) for k, v in value.items() if not isinstance(v, _Reset)}
    if isinstance(value, list):
        return [_resolve(v) for v in value]
    return value
