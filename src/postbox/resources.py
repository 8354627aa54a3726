"""Where postbox's files are: its own travel in the package, the user's are named by settings.

postbox's own files are package data, so an installed wheel has them wherever it runs: the SQL of
`postbox db init` (``postbox/sql``), the Lua apply script (``postbox/lua``) and the Debezium
connector template. That one lives in the project's top-level ``connectors/`` folder, beside
``consumers/``, ``schemas/`` and ``infra/``, where people look for it; the wheel carries the folder
as ``postbox/connectors`` (pyproject.toml's ``force-include``), and a checkout or an editable
install reads it in place.

The user's files belong to the user's service, and a setting names their folder — nothing here
searches the file system for a marker file:

- event schemas: ``POSTBOX_SCHEMAS_DIR`` (or an argument: ``Outbox(schemas_dir=...)``,
  ``App(schemas_dir=...)``, ``--schemas-dir``/``--dir``); when unset, ``./schemas`` of the working
  directory if there is one;
- user Lua effect functions: ``POSTBOX_LUA_DIR`` (or ``functions_dir=`` in code) only; when
  unset, none. Never the working directory by default: those files run inside Redis with the
  consumer's rights, and a consumer started from another folder would load whatever it found
  there. The local stack names its checkout's ``consumers/lua`` (:mod:`postbox.stack.addresses`).

The local stack (``postbox up``) is a development tool that runs from a postbox checkout; it finds
that checkout itself (:mod:`postbox.stack.checkout`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from postbox.errors import ConfigError

PACKAGE_DIR = Path(__file__).resolve().parent
LUA_DIR = PACKAGE_DIR / "lua"
SQL_DIR = PACKAGE_DIR / "sql"


def _connectors_dir() -> Path:
    """``postbox/connectors`` in an installed wheel, else the checkout's top-level ``connectors/``
    (``src/postbox`` is two levels below it)."""
    packaged = PACKAGE_DIR / "connectors"
    return packaged if packaged.is_dir() else PACKAGE_DIR.parents[1] / "connectors"


CONNECTORS_DIR = _connectors_dir()
CONNECTOR_TEMPLATE = CONNECTORS_DIR / "outbox.json"

SCHEMAS_DIR_ENV = "POSTBOX_SCHEMAS_DIR"
LUA_DIR_ENV = "POSTBOX_LUA_DIR"
#: The default, relative to the working directory (a service run from its own folder).
DEFAULT_SCHEMAS_DIR = Path("schemas")
#: Where the reference functions live in a checkout (the local stack names it; not a default).
DEFAULT_LUA_DIR = Path("consumers") / "lua"

SCHEMAS_LAYOUT = "<aggregate_type>/<EventType>.v<N>.avsc"


def schemas_dir(explicit: Path | str | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """The event schemas folder: ``explicit``, else ``POSTBOX_SCHEMAS_DIR``, else ``./schemas``.

    Raises :class:`ConfigError` naming the setting when the folder it names does not exist, or
    when nothing names one and the working directory has no ``schemas/``.
    """
    env = os.environ if environ is None else environ
    if explicit is not None:
        return _existing_dir(Path(explicit), f"schemas_dir={str(explicit)!r}", SCHEMAS_LAYOUT)
    if env.get(SCHEMAS_DIR_ENV):
        return _existing_dir(Path(env[SCHEMAS_DIR_ENV]), f"{SCHEMAS_DIR_ENV}={env[SCHEMAS_DIR_ENV]}", SCHEMAS_LAYOUT)
    default = Path.cwd() / DEFAULT_SCHEMAS_DIR
    if default.is_dir():
        return default
    raise ConfigError(
        f"no event schemas folder: {SCHEMAS_DIR_ENV} is not set and {Path.cwd()} has no {DEFAULT_SCHEMAS_DIR}/ folder",
        fix=f"set {SCHEMAS_DIR_ENV} to the folder holding {SCHEMAS_LAYOUT} "
        "(or pass schemas_dir= to Outbox/App, --schemas-dir to `postbox consume`, --dir to `postbox schemas`)",
    )


def lua_functions_dir(environ: Mapping[str, str] | None = None) -> Path | None:
    """The user Lua effect functions' folder: ``POSTBOX_LUA_DIR``, else None (no user functions;
    ``fx.call`` then fails naming the missing function and the setting)."""
    env = os.environ if environ is None else environ
    if env.get(LUA_DIR_ENV):
        return _existing_dir(Path(env[LUA_DIR_ENV]), f"{LUA_DIR_ENV}={env[LUA_DIR_ENV]}", "<name>.lua files")
    return None


def _existing_dir(path: Path, setting: str, holding: str) -> Path:
    path = path.expanduser()
    if not path.is_dir():
        raise ConfigError(f"{setting}: no such folder", fix=f"point it at the folder holding {holding}")
    return path.resolve()
