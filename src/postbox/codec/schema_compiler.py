"""The walk of the closure-building payload compiler (:mod:`compiled_check`).

It turns a fastavro-parsed schema into one closure per node, once per schema, so that a payload
is then handled by calling closures instead of walking the schema again. How a schema is taken
apart (named types compiled once, recursive ones reached through a cell, unions, the node kinds)
is written here; what a node's closure does, in the subclass. (:mod:`compiled_writer` writes the
source of one function per schema instead: on the emit path, calls per value were its cost.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, TypeVar

from postbox.codec.validate import PRIMITIVES

F = TypeVar("F")


class SchemaCompiler(Generic[F]):
    """Compiles schema nodes into functions ``F``; subclasses say what each node becomes."""

    def __init__(self, names: Mapping[str, Any]) -> None:
        self.names = names
        self.named: dict[str, F] = {}

    def compile(self, schema: Any) -> F:
        if isinstance(schema, str) and schema not in PRIMITIVES:
            return self._named(schema)
        if isinstance(schema, list):
            return self.union(schema)
        if isinstance(schema, str):
            return self.node(schema, {"type": schema})
        return self.node(schema["type"], schema)

    def _named(self, name: str) -> F:
        """A named type, compiled once; a recursive type reaches itself through the cell."""
        if name not in self.named:
            cell: list[F] = []
            self.named[name] = self.forward(cell)
            cell.append(self.compile(self.names[name]))
        return self.named[name]

    def union(self, branches: list[Any]) -> F:
        """The function of a union of ``branches``."""
        raise NotImplementedError

    def node(self, kind: str, schema: Mapping[str, Any]) -> F:
        """The function of a node of ``kind`` (a primitive or complex type; ``schema`` may carry
        a logicalType)."""
        raise NotImplementedError

    def forward(self, cell: list[F]) -> F:
        """A function that calls ``cell[0]`` (filled once the named type is compiled)."""
        raise NotImplementedError


__all__ = ["SchemaCompiler"]
