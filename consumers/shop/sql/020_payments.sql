-- The payment service's own tables (schema "payments"). One row per order: the primary key on
-- order_id is what makes a redelivered OrderPlaced charge nothing (INSERT ... ON CONFLICT DO NOTHING).
CREATE SCHEMA IF NOT EXISTS payments AUTHORIZATION postbox_owner;

-- Cards on file. Card numbers never travel in events: the payment service looks them up.
CREATE TABLE IF NOT EXISTS payments.cards (
    customer_id text PRIMARY KEY,
    card_number text NOT NULL
);
ALTER TABLE payments.cards OWNER TO postbox_owner;

CREATE TABLE IF NOT EXISTS payments.payments (
    order_id     text PRIMARY KEY,
    payment_id   text NOT NULL UNIQUE,
    customer_id  text,
    amount_cents bigint NOT NULL,
    currency     text NOT NULL,
    -- captured / failed: the provider's answer; voided: the order was cancelled before any charge.
    outcome      text NOT NULL CHECK (outcome IN ('captured', 'failed', 'voided')),
    reason       text,
    decided_at   timestamptz NOT NULL DEFAULT now(),
    refunded_at  timestamptz,
    CHECK (refunded_at IS NULL OR outcome = 'captured')
);
ALTER TABLE payments.payments OWNER TO postbox_owner;

REVOKE ALL ON SCHEMA payments FROM PUBLIC;
REVOKE ALL ON payments.cards, payments.payments FROM PUBLIC;
GRANT USAGE ON SCHEMA payments TO postbox_app;
GRANT SELECT, INSERT, UPDATE ON payments.cards, payments.payments TO postbox_app;
