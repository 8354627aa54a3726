"""``MODULE:APP`` → the :class:`App` object (``consumers.billing:app``, or a factory ``:make_app``)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from postbox.consumer.app import App
from postbox.errors import AppImportError


def load_app(spec: str, *, search: Path | None = None) -> App:
    """Import ``module.path:attribute``; the attribute is an App or a no-argument factory of one.

    The working directory (or ``search``) is put first on ``sys.path``, as ``python -m`` would, so
    ``consumers.<name>`` of the project checkout imports without installing it.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise AppImportError(f"{spec!r} is not MODULE:APP", fix="e.g. postbox consume consumers.billing:app")
    root = str((search or Path.cwd()).resolve())
    if root not in sys.path:
        sys.path.insert(0, root)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise AppImportError(
                f"cannot import module {module_name!r} (from {spec!r}): {exc}",
                fix="run from the project folder, or check the module path (consumers/<name>.py → consumers.<name>)",
            ) from None
        raise
    target = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise AppImportError(f"module {module_name!r} has no attribute {attr!r}", fix=f"define `{attr} = App(...)` in {module_name}") from None
    if not isinstance(target, App) and callable(target):
        target = target()
    if not isinstance(target, App):
        raise AppImportError(f"{spec} is a {type(target).__name__}, not a postbox.consumer.App")
    if not target.routes:
        raise AppImportError(f"{spec} has no handlers registered", fix="decorate functions with @app.handler(...)")
    return target
