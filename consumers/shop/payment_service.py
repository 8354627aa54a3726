"""The payment service's database work: charge and refund, each in one transaction with its event.

Idempotent by business key, so a redelivered event never charges or emits twice:

- ``charge_order``: ``INSERT INTO payments.payments ... ON CONFLICT (order_id) DO NOTHING``. Only
  when the row is new does it emit PaymentCaptured or PaymentFailed, through the outbox, in that
  same transaction. A redelivery finds the row and returns the outcome already stored.
- ``refund_order``: captured → refunded (an UPDATE guarded by ``refunded_at IS NULL``) emits
  PaymentRefunded once; an order cancelled before it was charged gets a ``voided`` row, so a late
  OrderPlaced charges nothing.

The payment provider is simulated by :func:`provider_charge`: cards on file come from
``payments.cards``; the test card ``4000 0000 0000 0002`` is always declined (as with real
providers' test cards), and so is a customer without a card on file.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TypeVar

import psycopg

from postbox import outbox
from postbox.errors import TransientEffectError

from consumers.shop.payloads import OrderPlaced

DECLINED_CARD = "4000000000000002"
GOOD_CARD = "4242424242424242"
AGGREGATE = "payment"

T = TypeVar("T")


def payment_id_of(order_id: str) -> str:
    """One payment per order: its id (the Kafka key of its events) follows from the order id."""
    return f"pay-{order_id}"


@dataclass(frozen=True)
class Outcome:
    """What the database holds for an order's payment after the call."""

    order_id: str
    outcome: str              # captured | failed | voided
    amount_cents: int
    currency: str
    reason: str | None
    refunded: bool
    new: bool                 # True when this call decided it (and emitted its event)

    @property
    def status(self) -> str:
        return "refunded" if self.refunded else self.outcome


def register_card(conn: psycopg.Connection[Any], customer_id: str, card_number: str) -> None:
    """Keep (or replace) a customer's card on file."""
    with conn.transaction():
        conn.execute(
            "INSERT INTO payments.cards (customer_id, card_number) VALUES (%s, %s)"
            " ON CONFLICT (customer_id) DO UPDATE SET card_number = EXCLUDED.card_number",
            (customer_id, card_number.replace(" ", "")),
        )


def provider_charge(card_number: str | None, amount_cents: int) -> tuple[bool, str | None]:
    """The simulated payment provider: (captured?, decline reason)."""
    if card_number is None:
        return False, "no card on file"
    if card_number == DECLINED_CARD:
        return False, "card declined"
    if amount_cents <= 0:
        return False, "invalid amount"
    return True, None


def charge_order(conn: psycopg.Connection[Any], order: OrderPlaced) -> Outcome:
    """Charge an OrderPlaced payload once; emit its outcome event only when the charge is new."""
    order_id = order.order_id
    amount = order.total_cents
    currency = order.currency
    now = datetime.now(timezone.utc)
    with conn.transaction():
        row = conn.execute("SELECT card_number FROM payments.cards WHERE customer_id = %s", (order.customer_id,)).fetchone()
        captured, reason = provider_charge(row[0] if row else None, amount)
        inserted = conn.execute(
            "INSERT INTO payments.payments (order_id, payment_id, customer_id, amount_cents, currency, outcome, reason, decided_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (order_id) DO NOTHING RETURNING order_id",
            (order_id, payment_id_of(order_id), order.customer_id, amount, currency,
             "captured" if captured else "failed", reason, now),
        ).fetchone()
        if inserted is not None:
            base = {"payment_id": payment_id_of(order_id), "order_id": order_id, "amount_cents": amount}
            if captured:
                outbox.emit(conn, AGGREGATE, payment_id_of(order_id), "PaymentCaptured",
                            {**base, "currency": currency, "captured_at": now})
            else:
                outbox.emit(conn, AGGREGATE, payment_id_of(order_id), "PaymentFailed",
                            {**base, "reason": reason or "declined", "retryable": False, "failed_at": now})
            return Outcome(order_id, "captured" if captured else "failed", amount, currency, reason, False, True)
        return _stored(conn, order_id)


def refund_order(conn: psycopg.Connection[Any], order_id: str) -> Outcome:
    """Compensate a cancelled order: refund a capture once, or void a payment not yet made."""
    now = datetime.now(timezone.utc)
    with conn.transaction():
        voided = conn.execute(
            "INSERT INTO payments.payments (order_id, payment_id, amount_cents, currency, outcome, reason, decided_at)"
            " VALUES (%s, %s, 0, 'EUR', 'voided', 'order cancelled before payment', %s)"
            " ON CONFLICT (order_id) DO NOTHING RETURNING order_id",
            (order_id, payment_id_of(order_id), now),
        ).fetchone()
        if voided is not None:
            return Outcome(order_id, "voided", 0, "EUR", "order cancelled before payment", False, True)
        refunded = conn.execute(
            "UPDATE payments.payments SET refunded_at = %s WHERE order_id = %s AND outcome = 'captured'"
            " AND refunded_at IS NULL RETURNING amount_cents, currency",
            (now, order_id),
        ).fetchone()
        if refunded is not None:
            outbox.emit(conn, AGGREGATE, payment_id_of(order_id), "PaymentRefunded", {
                "payment_id": payment_id_of(order_id), "order_id": order_id,
                "amount_cents": refunded[0], "currency": refunded[1], "refunded_at": now,
            })
            return Outcome(order_id, "captured", refunded[0], refunded[1], None, True, True)
        return _stored(conn, order_id)


def _stored(conn: psycopg.Connection[Any], order_id: str) -> Outcome:
    row = conn.execute(
        "SELECT outcome, amount_cents, currency, reason, refunded_at IS NOT NULL FROM payments.payments WHERE order_id = %s",
        (order_id,),
    ).fetchone()
    assert row is not None, order_id
    return Outcome(order_id, row[0], row[1], row[2], row[3], row[4], False)


class Database:
    """One lazily opened connection (POSTBOX_DATABASE_URL) with bounded reconnects.

    A lost connection is transient: the call is retried on a fresh connection for up to
    ``retry_for`` seconds (each call is idempotent, so a retry after an unknown commit outcome is
    safe); past that it raises :class:`~postbox.errors.TransientEffectError`, which the consumer
    runtime treats as transient: the partition backs off and the event is retried, never
    dead-lettered, never skipped.
    """

    def __init__(self, url: str | None = None, retry_for: float = 10.0) -> None:
        self.url = url
        self.retry_for = retry_for
        self._conn: psycopg.Connection[Any] | None = None
        #: One call at a time: a transaction must not interleave with another thread's.
        self._lock = threading.Lock()

    def connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            url = self.url
            if url is None:
                from postbox.settings import Settings

                url = Settings.load().database_url
            self._conn = psycopg.connect(url, connect_timeout=5, application_name="shop-payment")
        return self._conn

    def run(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        with self._lock:
            return self._run(fn)

    def _run(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        deadline = time.monotonic() + self.retry_for
        delay = 0.1
        while True:
            try:
                return fn(self.connection())
            except psycopg.OperationalError as exc:
                self.close()
                if time.monotonic() + delay > deadline:
                    raise TransientEffectError(f"PostgreSQL unavailable: {str(exc).strip()}", reason="database") from exc
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
            self._conn = None
