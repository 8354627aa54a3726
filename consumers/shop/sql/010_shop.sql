-- The order service's own tables (schema "shop"). Applied idempotently by `postbox demo`
-- (consumers.shop.setup.apply_sql) with an admin connection; the application connects as
-- postbox_app, which may read and write these tables but keeps its outbox rights: INSERT only.
CREATE SCHEMA IF NOT EXISTS shop AUTHORIZATION postbox_owner;

CREATE TABLE IF NOT EXISTS shop.orders (
    id            text PRIMARY KEY,
    customer_id   text NOT NULL,
    items         jsonb NOT NULL,              -- [{"sku", "quantity", "unit_price_cents"}]
    total_cents   bigint NOT NULL CHECK (total_cents >= 0),
    currency      text NOT NULL DEFAULT 'EUR',
    coupon        text,
    status        text NOT NULL DEFAULT 'placed' CHECK (status IN ('placed', 'cancelled')),
    cancel_reason text,
    placed_at     timestamptz NOT NULL,
    cancelled_at  timestamptz
);
ALTER TABLE shop.orders OWNER TO postbox_owner;

REVOKE ALL ON SCHEMA shop FROM PUBLIC;
REVOKE ALL ON shop.orders FROM PUBLIC;
GRANT USAGE ON SCHEMA shop TO postbox_app;
GRANT SELECT, INSERT, UPDATE ON shop.orders TO postbox_app;
