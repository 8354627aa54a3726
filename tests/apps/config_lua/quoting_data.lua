-- Writes its declared key, then fails with an error quoting the event's data (ARGV[1]), as the
-- shop's reserve_stock.lua quotes the SKU; ARGV[2] "raise": error(), else an error reply.
redis.call("HSET", KEYS[1], "f", "v")
if ARGV[2] == "raise" then
    error("out of stock: " .. ARGV[1])
end
return redis.error_reply("out of stock: " .. ARGV[1])
