-- KEYS[1] stock hash; ARGV sku, quantity. Refuses (fails the event) when the stock is short.
local have = tonumber(redis.call("HGET", KEYS[1], ARGV[1]) or "0")
local want = tonumber(ARGV[2])
if have < want then
    return redis.error_reply("SHORT only " .. have .. " of " .. ARGV[1] .. " left")
end
return redis.call("HINCRBY", KEYS[1], ARGV[1], -want)
