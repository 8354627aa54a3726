-- Runs a command the consumer user may not run through redis.pcall, then returns an error of its
-- own that says nothing of it: still the deployment's refusal.
local reply = redis.pcall("CONFIG", "GET", "maxmemory")
if type(reply) == "table" and reply.err then
    return redis.error_reply("stock check failed")
end
return reply
