"""Secrets from files: every secret-bearing ``POSTBOX_*`` variable may be given as ``<NAME>_FILE``.

Container platforms hand secrets over as files (Docker and Kubernetes secrets mounted under
``/run/secrets``): a URL with its password in a flag shows in ``ps``, and in a variable in the
deployment's spec. So each variable of :data:`SECRET_VARIABLES` is read from the file its
``_FILE`` twin names when the variable itself is unset; one trailing newline (what ``echo`` and
most editors write) is dropped. Both set, or a file that is missing, unreadable or empty, is a
:class:`ConfigError` naming the variable and the path. This module is the rule's only owner: every
reader of a secret-bearing variable asks :func:`env_value`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from postbox.errors import ConfigError

FILE_SUFFIX = "_FILE"

#: The variables that carry a password (in a URL or alone), each readable from ``<NAME>_FILE``.
SECRET_VARIABLES: tuple[str, ...] = (
    "POSTBOX_DATABASE_URL",
    "POSTBOX_REDIS_URL",
    "POSTBOX_ADMIN_DATABASE_URL",
    "POSTBOX_MAINT_DATABASE_URL",
    "POSTBOX_ADMIN_REDIS_URL",
    "POSTBOX_APP_PASSWORD",
    "POSTBOX_CDC_PASSWORD",
    "POSTBOX_MAINT_PASSWORD",
)


def env_value(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The value of ``name`` (None when unset or empty); for a variable of
    :data:`SECRET_VARIABLES`, else the content of the file ``<name>_FILE`` names."""
    env = os.environ if environ is None else environ
    direct = env.get(name) or None
    file_var = name + FILE_SUFFIX
    path = env.get(file_var) if name in SECRET_VARIABLES else None
    if not path:
        return direct
    if direct is not None:
        raise ConfigError(f"both {name} and {file_var} are set", fix=f"set only one of them ({file_var} keeps the secret out of the environment)")
    return _read_secret(file_var, Path(path))


def env_source(name: str, environ: Mapping[str, str] | None = None) -> str:
    """Where :func:`env_value` read ``name`` from: the variable, or ``<name>_FILE``."""
    env = os.environ if environ is None else environ
    return name + FILE_SUFFIX if name in SECRET_VARIABLES and env.get(name + FILE_SUFFIX) and not env.get(name) else name


def _read_secret(file_var: str, path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{file_var} names {path}, which does not exist", fix=f"mount the secret at {path}, or point {file_var} at the file that holds it") from None
    except IsADirectoryError:
        raise ConfigError(f"{file_var} names {path}, which is a directory, not a file", fix=f"point {file_var} at the secret's file inside it") from None
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"{file_var}: cannot read {path} ({why})", fix=f"make {path} readable by this process's user (uid {os.getuid()})") from None
    value = text[:-1] if text.endswith("\n") else text
    value = value[:-1] if value.endswith("\r") else value
    if not value.strip():
        raise ConfigError(f"{file_var} names {path}, which is empty", fix=f"write the secret into {path}")
    return value
