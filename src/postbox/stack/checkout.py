"""The postbox checkout the local stack runs from.

The local stack (`postbox up`, `postbox demo`) is a development tool: it needs the checkout's
``infra/`` (configuration templates and the Maven poms of the jars) and keeps its state in the
checkout's ``.postbox/``. The library never calls this; an installed service names its own files
through settings (:mod:`postbox.resources`).

The checkout is ``POSTBOX_HOME`` when set, otherwise the nearest folder above the working directory
holding ``infra/maven``, otherwise the source tree this package runs from (an editable install).
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from postbox.errors import ConfigError
from postbox.resources import PACKAGE_DIR

_MARKER = Path("infra") / "maven"


@lru_cache(maxsize=None)
def checkout_root() -> Path:
    """The checkout holding infra/ (and the reference app's consumers/ and schemas/)."""
    env = os.environ.get("POSTBOX_HOME")
    if env:
        root = Path(env).expanduser().resolve()
        if not (root / _MARKER).is_dir():
            raise ConfigError(f"POSTBOX_HOME={env}: no {_MARKER}/ there", fix="point POSTBOX_HOME at a postbox checkout")
        return root
    for candidate in [Path.cwd(), *Path.cwd().parents]:
        if (candidate / _MARKER).is_dir():
            return candidate
    source_tree = PACKAGE_DIR.parents[1]
    if (source_tree / _MARKER).is_dir():
        return source_tree
    raise ConfigError(
        f"the local stack runs from a postbox checkout, and there is none here (no {_MARKER}/ here or above)",
        fix="run `postbox up` / `postbox demo` in a clone of postbox, or set POSTBOX_HOME to one; "
        "point your own service at its infrastructure with POSTBOX_DATABASE_URL and friends instead",
    )


def infra_dir() -> Path:
    return checkout_root() / "infra"
