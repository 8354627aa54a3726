"""JSON values of Avro logical types, read into the Python types fastavro gives the Avro encoding.

A handler must not care whether its event came as Avro (postbox's writer) or as JSON (a stock
Debezium outbox): ``placed_at`` is a timezone-aware UTC ``datetime`` and ``amount`` a ``Decimal``
either way. JSON has no such types, so each logical type accepts the spellings JSON producers use:

==========================  =================================================================
logical type                JSON value
==========================  =================================================================
``timestamp-millis/micros`` epoch milliseconds/microseconds (Avro's JSON encoding), or ISO-8601
                            text with an offset or ``Z``; → aware UTC ``datetime``, cut to the
                            type's precision as Avro's encoding cuts it
``local-timestamp-*``       epoch units, or ISO-8601 text without offset; → naive ``datetime``
``date``                    days since 1970-01-01, or ``YYYY-MM-DD``; → ``date``
``time-millis/micros``      units since midnight, or ``HH:MM:SS[.ffffff]``; → ``time``
``decimal``                 a JSON number or decimal text (``"12.50"``); → ``Decimal`` with the
                            schema's scale (more decimal places, or digits, than the schema allows
                            are refused, never rounded)
``uuid``                    its text; → ``UUID``
==========================  =================================================================

A value no spelling reads raises :class:`~postbox.codec.validate.Invalid` naming the field.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal, InvalidOperation
from typing import Any

from postbox.codec.validate import Invalid

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
LOCAL_EPOCH = datetime(1970, 1, 1)
EPOCH_DAY = date(1970, 1, 1)
MIDNIGHT = datetime(1970, 1, 1)


def read_logical(schema: Mapping[str, Any], datum: Any, path: str) -> tuple[bool, Any]:
    """(handled, value): the JSON ``datum`` of a logical-typed ``schema`` as its Python type;
    (False, datum) for logical types postbox leaves to the base type's check."""
    reader = READERS.get(schema.get("logicalType", ""))
    if reader is None:
        return False, datum
    try:
        return True, reader(schema, datum, path)
    except (ValueError, OverflowError, InvalidOperation) as exc:  # a date out of range, text that is no number...
        raise Invalid(path, datum, f"is not a {schema['logicalType']}: {exc}") from None


def _number(datum: Any) -> bool:
    return isinstance(datum, int) and not isinstance(datum, bool)


def _instant(unit: str) -> Callable[[Mapping[str, Any], Any, str], datetime]:
    def read(schema: Mapping[str, Any], datum: Any, path: str) -> datetime:
        if _number(datum):
            return EPOCH + timedelta(**{unit: datum})
        value = _datetime_text(schema, datum, path)
        if value.tzinfo is None:
            raise Invalid(path, datum, f"{schema['logicalType']} text needs an offset or Z (a time without one is ambiguous)")
        return _cut(value.astimezone(timezone.utc), unit)

    return read


def _local(unit: str) -> Callable[[Mapping[str, Any], Any, str], datetime]:
    def read(schema: Mapping[str, Any], datum: Any, path: str) -> datetime:
        if _number(datum):
            return LOCAL_EPOCH + timedelta(**{unit: datum})
        return _cut(_datetime_text(schema, datum, path).replace(tzinfo=None), unit)

    return read


def _date(schema: Mapping[str, Any], datum: Any, path: str) -> date:
    if _number(datum):
        return EPOCH_DAY + timedelta(days=datum)
    if isinstance(datum, str):
        return date.fromisoformat(datum)
    raise Invalid(path, datum, f"expected days since 1970-01-01 or YYYY-MM-DD text, got {type(datum).__name__}")


def _time(unit: str) -> Callable[[Mapping[str, Any], Any, str], time]:
    def read(schema: Mapping[str, Any], datum: Any, path: str) -> time:
        if _number(datum):
            return (MIDNIGHT + timedelta(**{unit: datum})).time()
        if isinstance(datum, str):
            return _cut(datetime.combine(EPOCH_DAY, time.fromisoformat(datum)), unit).time()
        raise Invalid(path, datum, f"expected {unit} since midnight or HH:MM:SS text, got {type(datum).__name__}")

    return read


def _decimal(schema: Mapping[str, Any], datum: Any, path: str) -> Decimal:
    if isinstance(datum, str) or _number(datum):
        value = Decimal(datum)
    elif isinstance(datum, float):
        value = Decimal(repr(datum))  # the JSON text's digits (shortest repr), not the binary float's
    else:
        raise Invalid(path, datum, f"expected a number or decimal text, got {type(datum).__name__}")
    if not value.is_finite():
        raise Invalid(path, datum, "is not a finite decimal")
    scale, precision = int(schema.get("scale", 0)), int(schema["precision"])
    exponent = value.as_tuple().exponent
    if isinstance(exponent, int) and -exponent > scale:
        raise Invalid(path, datum, f"has more than {scale} decimal places (decimal({precision},{scale}))")
    value = value.quantize(Decimal(1).scaleb(-scale))
    if len(value.as_tuple().digits) > precision:
        raise Invalid(path, datum, f"has more than {precision} digits (decimal({precision},{scale}))")
    return value


def _uuid(schema: Mapping[str, Any], datum: Any, path: str) -> uuid.UUID:
    if isinstance(datum, str):
        return uuid.UUID(datum)
    raise Invalid(path, datum, f"expected UUID text, got {type(datum).__name__}")


def _datetime_text(schema: Mapping[str, Any], datum: Any, path: str) -> datetime:
    if isinstance(datum, str):
        return datetime.fromisoformat(datum.replace("Z", "+00:00").replace("z", "+00:00"))
    raise Invalid(path, datum, f"expected epoch units or ISO-8601 text for {schema['logicalType']}, got {type(datum).__name__}")


def _cut(value: datetime, unit: str) -> datetime:
    """Avro's millisecond types keep milliseconds: the same value the Avro encoding would give."""
    return value.replace(microsecond=value.microsecond // 1000 * 1000) if unit == "milliseconds" else value


READERS: dict[str, Callable[[Mapping[str, Any], Any, str], Any]] = {
    "timestamp-millis": _instant("milliseconds"),
    "timestamp-micros": _instant("microseconds"),
    "local-timestamp-millis": _local("milliseconds"),
    "local-timestamp-micros": _local("microseconds"),
    "date": _date,
    "time-millis": _time("milliseconds"),
    "time-micros": _time("microseconds"),
    "decimal": _decimal,
    "uuid": _uuid,
}
