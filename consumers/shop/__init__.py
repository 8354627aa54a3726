"""The reference application: a small shop whose order saga runs on postbox.

    order service (producer)  orders.place_order / cancel_order: shop.orders row + OrderPlaced /
                              OrderCancelled in one PostgreSQL transaction (the outbox)
    payment   (consumer)      charges on OrderPlaced in payments.payments, idempotent by order id,
                              emits PaymentCaptured / PaymentFailed in that same transaction; refunds
                              on OrderCancelled (PaymentRefunded); Redis projection of outcomes
    inventory (consumer)      reserves stock on OrderPlaced (Lua function reserve_stock: all lines
                              or none, never negative); releases it on OrderCancelled/PaymentFailed
    shipping  (consumer)      Redis projection of the orders ready to ship (Lua track_shipment)

Run a consumer with ``postbox consume consumers.shop.inventory:app`` (and ``payment``,
``shipping``); ``postbox demo`` runs the whole saga. See docs/demo.md.
"""
