-- KEYS[1] a hash, KEYS[2] a counter; ARGV field, value, increment.
-- Writes the hash first, so a failing INCRBY (WRONGTYPE, not an integer) leaves a partial change
-- that the engine must undo from its DUMP snapshots.
redis.call("HSET", KEYS[1], ARGV[1], ARGV[2])
return redis.call("INCRBY", KEYS[2], ARGV[3])
