"""Payment consumer group: charge orders, refund cancelled ones, and project the outcomes.

    postbox consume consumers.shop.payment:app

The charge lives in PostgreSQL (payment_service.py): one row per order, so a redelivered
OrderPlaced never charges twice, and PaymentCaptured/PaymentFailed are emitted through the outbox
in the charge's own transaction only when the row is new, so they are never emitted twice either.
The Redis projection (status per order, totals per shard) goes through the effects engine, so it
is applied exactly once per event even when the database work is re-run by a redelivery.

The database connection is a resource of the app: a start-up hook opens it once per process, the
handlers take it by parameter name (``db``), and a shutdown hook closes it on SIGTERM.
"""

from __future__ import annotations

import logging
from typing import Any

from postbox.consumer import App
from postbox.effects import Effects
from postbox.events import Event

from consumers.shop.keys import PaymentKeys
from consumers.shop.payloads import OrderCancelled, OrderPlaced
from consumers.shop.payment_service import Database, Outcome, charge_order, refund_order

app = App("payment")
log = logging.getLogger(__name__)


def shard_slot(event: Event) -> str:
    """Routing key: the order's payment shard (its marker lives with the projection it writes)."""
    return PaymentKeys(event.payload["order_id"]).status


@app.on_startup
def db() -> Database:
    """The payment database, opened once per process (a start-up failure names this hook); the
    handlers take it by parameter name."""
    database = Database()
    database.connection()
    return database


@app.on_shutdown
def close_db(db: Database) -> None:
    db.close()


@app.handler("order", "OrderPlaced", routing_key=shard_slot)
def charge(event: Event[OrderPlaced], fx: Effects, db: Database) -> None:
    outcome = db.run(lambda conn: charge_order(conn, event.payload))
    log.info("order charged: %s", outcome.status)
    project_charge(event, fx, outcome)


@app.handler("order", "OrderCancelled", routing_key=shard_slot)
def refund(event: Event[OrderCancelled], fx: Effects, db: Database) -> None:
    outcome = db.run(lambda conn: refund_order(conn, event.payload.order_id))
    log.info("order refund: %s", outcome.status)
    project_refund(event, fx, outcome)


def project_charge(event: Event[Any], fx: Effects, outcome: Outcome) -> None:
    """Redis effects of a charge. Uses the outcome stored at the charge (captured or failed), not
    whether this delivery made it: a redelivery after a crash between the database commit and the
    Redis apply must still project it, and the dedupe marker makes that happen exactly once."""
    k = PaymentKeys(outcome.order_id)
    fx.hset(k.status, outcome.order_id, outcome.outcome)
    if outcome.outcome == "captured":
        fx.hincrby(k.totals, "captured", 1).hincrby(k.totals, "captured_cents", outcome.amount_cents)
    elif outcome.outcome == "failed":
        fx.hincrby(k.totals, "failed", 1)
    fx.hincrby(k.applied, event.id, 1)


def project_refund(event: Event[Any], fx: Effects, outcome: Outcome) -> None:
    k = PaymentKeys(outcome.order_id)
    if outcome.refunded:
        fx.hset(k.status, outcome.order_id, "refunded")
        fx.hincrby(k.totals, "refunded", 1).hincrby(k.totals, "refunded_cents", outcome.amount_cents)
    elif outcome.outcome == "voided":
        fx.hset(k.status, outcome.order_id, "voided")
        fx.hincrby(k.totals, "voided", 1)
    # failed: nothing was charged, nothing to refund.
    fx.hincrby(k.applied, event.id, 1)
