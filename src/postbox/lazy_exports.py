"""Package names loaded from their modules on first use (PEP 562).

Why: ``postbox.effects`` and ``postbox.consumer`` re-export classes whose modules import redis-py
(~0.3 s of CPU with its OpenTelemetry hooks) and the consumer runtime. Every CLI process imports
single modules of those packages (the effects ACL table, the dead-letter record); with the names
loaded on first use, a command that never talks to Redis does not pay for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from importlib import import_module
from typing import Any


def lazy_exports(package: str, table: Mapping[str, str],
                 namespace: MutableMapping[str, Any]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:  # fmt: skip
    """The ``__getattr__`` and ``__dir__`` of ``package`` (its ``globals()`` is ``namespace``):
    a name of ``table`` (name → module) is imported from its module when first asked for, then kept
    in the namespace; ``dir()`` lists ``__all__`` as well as what is loaded."""

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module), name)
        namespace[name] = value  # found directly from now on
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *namespace.get("__all__", ())})

    return __getattr__, __dir__
