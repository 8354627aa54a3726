"""Where the project's files are: connector configs, schemas, SQL and Lua.

postbox runs from a project checkout (users keep their `consumers/`, `schemas/` and
`connectors/` beside postbox's own). The root is ``POSTBOX_HOME`` when set, otherwise the
nearest folder above the working directory holding ``connectors/outbox.json``, otherwise the
checkout this package was installed from (editable installs).
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from postbox.errors import ConfigError

_MARKER = Path("connectors") / "outbox.json"
PACKAGE_DIR = Path(__file__).resolve().parent
LUA_DIR = PACKAGE_DIR / "lua"


@lru_cache(maxsize=None)
def project_root() -> Path:
    """The project folder holding connectors/, schemas/, infra/ and consumers/."""
    env = os.environ.get("POSTBOX_HOME")
    if env:
        root = Path(env).expanduser().resolve()
        if not (root / _MARKER).is_file():
            raise ConfigError(f"POSTBOX_HOME={env}: no {_MARKER} there", fix="point POSTBOX_HOME at a postbox checkout")
        return root
    for candidate in [Path.cwd(), *Path.cwd().parents]:
        if (candidate / _MARKER).is_file():
            return candidate
    source_checkout = PACKAGE_DIR.parents[1]
    if (source_checkout / _MARKER).is_file():
        return source_checkout
    raise ConfigError(
        f"cannot find the postbox project folder (no {_MARKER} here or above)",
        fix="run postbox from the project checkout, or set POSTBOX_HOME",
    )


def connectors_dir() -> Path:
    return project_root() / "connectors"


def schemas_dir() -> Path:
    return project_root() / "schemas"


def infra_dir() -> Path:
    return project_root() / "infra"
