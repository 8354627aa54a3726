-- Writes its declared key, then runs a command the consumer user may not run (CONFIG: refused).
redis.call("HSET", KEYS[1], "f", "v")
return redis.call("CONFIG", "GET", "maxmemory")
