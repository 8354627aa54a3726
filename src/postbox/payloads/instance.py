"""A payload given as an instance of a payload class, turned into the mapping the codecs encode.

Why its own module: the writer (``emit``, ``emit_many``, the asyncio writer) and the test harness
(``make_event``) all accept the classes `postbox schemas codegen` writes, and one function decides
how such an instance becomes a mapping, so an event emitted and an event made in a test encode alike.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, Protocol, Union


class PayloadInstance(Protocol):
    """An instance of a dataclass (a class `postbox schemas codegen` writes, or your own)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]


#: What the writer takes as a payload: a mapping (a TypedDict is one), or a payload class instance.
EventPayload = Union[Mapping[str, Any], PayloadInstance]


def as_mapping(payload: Any) -> Any:
    """A dataclass instance → its mapping (nested ones too); anything else as it is, for the codec
    to accept or refuse with its own error."""
    if dataclasses.is_dataclass(payload) and not isinstance(payload, type):
        return dataclasses.asdict(payload)
    return payload


__all__ = ["EventPayload", "PayloadInstance", "as_mapping"]
