-- Reserve an order's stock, all lines or none; stock never goes negative.
--
-- KEYS[1] available units per SKU (hash)   KEYS[2] reserved units per SKU (hash)
-- KEYS[3] this order's reservation (hash: SKU -> units, plus _status)
-- ARGV[1] order id, then SKU, quantity pairs.
--
-- Returns "reserved", or "skipped" when the order was already released (its PaymentFailed or
-- OrderCancelled reached inventory first: topics are consumed independently). Short stock fails
-- the event with an OUT_OF_STOCK error before anything changed (and the engine would undo anyway).
local status = redis.call("HGET", KEYS[3], "_status")
if status == "reserved" then
    return "already reserved"
end
if status == "released" then
    return "skipped"
end

local order = ARGV[1]
local wanted, skus = {}, {}
for i = 2, #ARGV, 2 do
    local sku, qty = ARGV[i], tonumber(ARGV[i + 1])
    if qty == nil or qty <= 0 or qty ~= math.floor(qty) then
        return redis.error_reply("BAD_QUANTITY order " .. order .. ": " .. tostring(ARGV[i + 1]) .. " units of " .. sku)
    end
    if wanted[sku] == nil then
        wanted[sku] = 0
        skus[#skus + 1] = sku
    end
    wanted[sku] = wanted[sku] + qty
end
if #skus == 0 then
    return redis.error_reply("EMPTY_ORDER order " .. order .. " has no lines")
end

-- Check every line before changing anything.
for _, sku in ipairs(skus) do
    local have = tonumber(redis.call("HGET", KEYS[1], sku) or "0")
    if have < wanted[sku] then
        return redis.error_reply("OUT_OF_STOCK order " .. order .. ": " .. sku .. " has " .. have .. ", needs " .. wanted[sku])
    end
end
for _, sku in ipairs(skus) do
    redis.call("HINCRBY", KEYS[1], sku, -wanted[sku])
    redis.call("HINCRBY", KEYS[2], sku, wanted[sku])
    redis.call("HSET", KEYS[3], sku, wanted[sku])
end
redis.call("HSET", KEYS[3], "_status", "reserved")
return "reserved"
