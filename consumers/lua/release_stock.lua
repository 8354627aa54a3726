-- Release an order's reservation (compensation for a cancelled order or a failed payment).
--
-- KEYS[1] available units per SKU (hash)   KEYS[2] reserved units per SKU (hash)
-- KEYS[3] this order's reservation (hash: SKU -> units, plus _status)
-- ARGV[1] order id, ARGV[2] reason.
--
-- Returns "released" (units went back), "already released" (both a cancellation and a failed
-- payment arrived), or "tombstone" (nothing reserved yet: the later OrderPlaced is skipped).
local status = redis.call("HGET", KEYS[3], "_status")
if status == "released" then
    return "already released"
end
local result = "tombstone"
if status == "reserved" then
    local lines = redis.call("HGETALL", KEYS[3])
    for i = 1, #lines, 2 do
        local sku = lines[i]
        if string.sub(sku, 1, 1) ~= "_" then
            local qty = tonumber(lines[i + 1])
            redis.call("HINCRBY", KEYS[1], sku, qty)
            redis.call("HINCRBY", KEYS[2], sku, -qty)
        end
    end
    result = "released"
end
redis.call("HSET", KEYS[3], "_status", "released", "_reason", ARGV[2])
return result
