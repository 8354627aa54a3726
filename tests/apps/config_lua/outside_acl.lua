-- Writes its declared key, then a key outside the consumer user's ACL patterns: Redis refuses it.
redis.call("HSET", KEYS[1], "f", "v")
return redis.call("SET", "outside:" .. ARGV[1], "x")
