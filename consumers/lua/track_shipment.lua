-- Shipping projection: record one saga fact about an order and keep the "ready to ship" set right.
--
-- KEYS[1] the order's shipping state (hash of facts)   KEYS[2] ready-to-ship order ids (set)
-- KEYS[3] log of orders that became ready (list of "order_id placed_ms ready_ms")
-- ARGV[1] order id, ARGV[2] fact (placed|captured|failed|cancelled|refunded), ARGV[3] now in ms,
-- ARGV[4] placed_at in ms (OrderPlaced only, else "").
--
-- Facts only ever get added, so the result does not depend on the order in which the order and
-- payment topics are consumed: ready = placed and captured and not (cancelled or failed).
local order, fact, now_ms = ARGV[1], ARGV[2], ARGV[3]
redis.call("HSET", KEYS[1], fact, now_ms)
if ARGV[4] ~= nil and ARGV[4] ~= "" then
    redis.call("HSET", KEYS[1], "placed_at", ARGV[4])
end
local f = redis.call("HMGET", KEYS[1], "placed", "captured", "failed", "cancelled", "refunded")
local ready = f[1] and f[2] and not f[3] and not f[4] and not f[5]
if ready then
    if redis.call("SADD", KEYS[2], order) == 1 then
        local placed_at = redis.call("HGET", KEYS[1], "placed_at") or ""
        redis.call("HSET", KEYS[1], "ready_at", now_ms)
        redis.call("RPUSH", KEYS[3], order .. " " .. placed_at .. " " .. now_ms)
    end
    return "ready"
end
redis.call("SREM", KEYS[2], order)
if f[3] or f[4] or f[5] then
    return "compensated"
end
return "waiting"
