"""Typed payloads: handlers that read ``Event[OrderPaid]`` instead of a mapping.

- :mod:`~postbox.payloads.handler` — which class a handler asks for, and the wrapper that builds it;
- :mod:`~postbox.payloads.build` — mapping → dataclass / TypedDict, each value checked;
- :mod:`~postbox.payloads.fit` and :mod:`~postbox.payloads.check` — the class against the event's
  Avro schema, when the app starts;
- :mod:`~postbox.payloads.codegen` — the classes written from ``schemas/`` (``postbox schemas codegen``).
"""

from postbox.payloads.build import PayloadBuilder
from postbox.payloads.check import check_routes
from postbox.payloads.handler import TypedHandler, payload_class_of

__all__ = ["PayloadBuilder", "TypedHandler", "check_routes", "payload_class_of"]
