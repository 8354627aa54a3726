#!lua flags=
-- luacheck: globals ARGV KEYS redis unpack
--
-- postbox: apply the Redis effects of a batch of events, each exactly once per consumer group
-- and all-or-nothing.
--
-- Flags: deliberately none (the empty list still opts into Redis 7's shebang semantics).
--   * no `allow-oom`: when the server is at maxmemory with a noeviction policy, Redis refuses the
--     whole call with an OOM error reply before the first line runs. Nothing is half-applied, and
--     the client tells a refused call (error reply: retry later) from a handled failure (normal
--     reply). Once running, a script's writes are never refused for memory, so an undo cannot be
--     refused either.
--   * no `no-writes`: it writes.
--   * no `allow-stale`: a replica that lost its primary must not run it.
--   * no `no-cluster`: it runs on Redis Cluster, one hash slot per call (the client groups).
--   * no `allow-cross-slot-keys`: every key of one call shares one slot; Redis enforces it, and a
--     user effect function touching an undeclared key of another slot fails instead of reaching
--     data this call cannot undo.
--
-- EVALSHA sha #KEYS key... arg...
--   KEYS  every key the batch touches (effect keys, dedupe markers, failure streams), each once;
--         commands below refer to keys by their position in KEYS.
--   ARGV  header:   protocol, group, marker_ttl_ms, failures_maxlen, failures_ttl_ms,
--                   sync_duplicates ("1": the client sends WAITAOF after this call), event_count
--         per event: event_id, marker_key_index, legacy_marker_key_index ("0": none),
--                    failures_key_index, command_count
--         per command: op, key_count, key_index..., arg_count, arg...
--   Values only ever travel in ARGV; no value is part of this source.
--
-- Key layout (made by src/postbox/effects/keys.py, the one place that defines it):
--   marker        <ns>:{<routing tag>}:seen:<group, ':' and '%' escaped>:<event id>  = "1", PX ttl
--                 a function of the consumer group and the event only (never of the effects),
--                 in the slot of the event's routing tag (its aggregate, or the handler's
--                 routing key); the effect keys must be in that slot on Redis Cluster.
--   legacy marker <ns>:{<first effect key's tag, or the event id>}:seen:<group>:<event id>
--                 the layout before the identity change, only read (upgrade transition).
--   failures      <ns>:failures:<group> (single server) or <ns>:{<routing tag>}:failures:<group>
--
-- Duplicates under WAITAOF: WAITAOF waits for the writes of its own connection only. With
-- sync_duplicates, a duplicate rewrites its marker unchanged (SET <marker> 1 KEEPTTL): a write
-- ordered after the marker in the AOF, so the client's WAITAOF covers the marker the duplicate
-- relied on, while its value and TTL (from which `postbox trace` reads its age) stay as they were.
--
-- Reply: one array per event, in order:
--   {1}                                          applied (effects and marker written)
--   {2}                                          duplicate (marker present, nothing changed)
--   {3, command_number, op, error}               failed; what the event changed is undone,
--                                                the failure is recorded, no marker is written
--   {4, command_number, op, error, undo_error}   failed and the undo failed too: a bug, the
--                                                event's keys may be partial; stop and look
--   {5, command_number, op, error}               refused by the configuration (an ACL refusal,
--                                                a command scripts may not run): the same for
--                                                every event, so not the event's failure. What
--                                                the event changed is undone, nothing is
--                                                recorded, and the reply ENDS here: later events
--                                                of the call are not run (the client stops).
--
-- Undo: before each command runs, the script records how to put back what that command will
-- change: the previous values of the fields/members it names (HMGET, SMISMEMBER, ZMSCORE, GET),
-- the previous TTL (PEXPIRETIME) when it may delete the key, the stream's id counters (XINFO
-- STREAM) for XADD, and otherwise a DUMP of the whole key (SET, DEL, user functions). A key with a
-- DUMP taken in this event needs no further records: restoring the DUMP also undoes every later
-- change. On failure the records run newest first, so each one meets the state its command left.
-- The event's LAST command gets no record (nor snapshot): a Redis command that returns an error
-- has changed nothing, and nothing that can fail runs after it. A user function is the exception
-- (it may write, then fail), so its keys are snapshotted wherever it stands.
-- Stream trimming (XADD's MAXLEN ~) cannot be undone, so it runs only after every command of the
-- event has succeeded.

local PROTOCOL = "2"

-- User effect functions, from consumers/lua/<name>.lua, each a function(KEYS, ARGV) compiled into
-- this script by the loader (trusted source files, never data). Filled in at this marker:
local EFFECT_FUNCTIONS = {}
-- @@EFFECT_FUNCTIONS@@

local function is_error(reply)
    return type(reply) == "table" and reply.err ~= nil
end

local function error_text(err)
    if type(err) == "table" then
        return tostring(err.err or err)
    end
    return tostring(err)
end

-- An absolute expiry in ms since the epoch (0 when the key has none or is absent).
local function expire_at(key)
    local at = redis.call("PEXPIRETIME", key)
    if at > 0 then
        return at
    end
    return 0
end

local function restore_expire_at(key, at)
    if at > 0 then
        redis.call("PEXPIREAT", key, string.format("%d", at))
    end
end

-- Undo record that puts back the whole key as it is now (absent keys are deleted on undo).
local function snapshot(key)
    local dump = redis.call("DUMP", key)
    if not dump then
        return function()
            redis.call("DEL", key)
        end
    end
    local at = expire_at(key)
    return function()
        if at > 0 then
            redis.call("RESTORE", key, string.format("%d", at), dump, "REPLACE", "ABSTTL")
        else
            redis.call("RESTORE", key, "0", dump, "REPLACE")
        end
    end
end

local function every_other(list, first)
    local out = {}
    for i = first, #list, 2 do
        out[#out + 1] = list[i]
    end
    return out
end

-- Put back hash fields from their previous values (false = the field did not exist).
local function restore_fields(key, fields, prior)
    local put, drop = {}, {}
    for i = 1, #fields do
        if prior[i] then
            put[#put + 1] = fields[i]
            put[#put + 1] = prior[i]
        else
            drop[#drop + 1] = fields[i]
        end
    end
    if #drop > 0 then
        redis.call("HDEL", key, unpack(drop))
    end
    if #put > 0 then
        redis.call("HSET", key, unpack(put))
    end
end

-- Put back sorted-set members from their previous scores (false = not a member).
local function restore_scores(key, members, prior)
    local put, drop = {}, {}
    for i = 1, #members do
        if prior[i] then
            put[#put + 1] = prior[i]
            put[#put + 1] = members[i]
        else
            drop[#drop + 1] = members[i]
        end
    end
    if #drop > 0 then
        redis.call("ZREM", key, unpack(drop))
    end
    if #put > 0 then
        redis.call("ZADD", key, unpack(put))
    end
end

-- Each op: function(keys, args, covered, trims) -> reply, undo (nil when nothing to undo).
-- `covered` is true when no record is needed: the key already has a snapshot in this event, or
-- this is the event's last command (see Undo in the header).
-- A reply that is an error table means the command failed and changed nothing.
local OPS = {}

OPS.hset = function(keys, args, covered)
    local key = keys[1]
    if covered then
        return redis.pcall("HSET", key, unpack(args))
    end
    local fields = every_other(args, 1)
    local prior = redis.pcall("HMGET", key, unpack(fields))
    if is_error(prior) then
        return prior
    end
    local reply = redis.pcall("HSET", key, unpack(args))
    return reply, function()
        restore_fields(key, fields, prior)
    end
end

OPS.hincrby = function(keys, args, covered)
    local key, field = keys[1], args[1]
    if covered then
        return redis.pcall("HINCRBY", key, field, args[2])
    end
    local prior = redis.pcall("HGET", key, field)
    if is_error(prior) then
        return prior
    end
    local reply = redis.pcall("HINCRBY", key, field, args[2])
    return reply, function()
        restore_fields(key, { field }, { prior })
    end
end

OPS.hdel = function(keys, args, covered)
    local key = keys[1]
    if covered then
        return redis.pcall("HDEL", key, unpack(args))
    end
    local prior = redis.pcall("HMGET", key, unpack(args))
    if is_error(prior) then
        return prior
    end
    local at = expire_at(key)
    local reply = redis.pcall("HDEL", key, unpack(args))
    return reply, function()
        restore_fields(key, args, prior)
        restore_expire_at(key, at)
    end
end

OPS.incrby = function(keys, args, covered)
    local key = keys[1]
    if covered then
        return redis.pcall("INCRBY", key, args[1])
    end
    local prior = redis.pcall("GET", key)
    if is_error(prior) then
        return prior
    end
    local reply = redis.pcall("INCRBY", key, args[1])
    return reply, function()
        if prior then
            redis.call("SET", key, prior, "KEEPTTL")
        else
            redis.call("DEL", key)
        end
    end
end

OPS.sadd = function(keys, args, covered)
    local key = keys[1]
    if covered then
        return redis.pcall("SADD", key, unpack(args))
    end
    local prior = redis.pcall("SMISMEMBER", key, unpack(args))
    if is_error(prior) then
        return prior
    end
    local reply = redis.pcall("SADD", key, unpack(args))
    return reply, function()
        local added = {}
        for i = 1, #args do
            if prior[i] == 0 then
                added[#added + 1] = args[i]
            end
        end
        if #added > 0 then
            redis.call("SREM", key, unpack(added))
        end
    end
end

OPS.srem = function(keys, args, covered)
    local key = keys[1]
    if covered then
        return redis.pcall("SREM", key, unpack(args))
    end
    local prior = redis.pcall("SMISMEMBER", key, unpack(args))
    if is_error(prior) then
        return prior
    end
    local at = expire_at(key)
    local reply = redis.pcall("SREM", key, unpack(args))
    return reply, function()
        local removed = {}
        for i = 1, #args do
            if prior[i] == 1 then
                removed[#removed + 1] = args[i]
            end
        end
        if #removed > 0 then
            redis.call("SADD", key, unpack(removed))
            restore_expire_at(key, at)
        end
    end
end

-- args: option_count, option..., score, member, score, member...
OPS.zadd = function(keys, args, covered)
    local key = keys[1]
    local first = tonumber(args[1]) + 2
    local command = { "ZADD", key }
    for i = 2, #args do
        command[#command + 1] = args[i]
    end
    if covered then
        return redis.pcall(unpack(command))
    end
    local members = every_other(args, first + 1)
    local prior = redis.pcall("ZMSCORE", key, unpack(members))
    if is_error(prior) then
        return prior
    end
    local reply = redis.pcall(unpack(command))
    return reply, function()
        restore_scores(key, members, prior)
    end
end

OPS.zincrby = function(keys, args, covered)
    local key, member = keys[1], args[2]
    if covered then
        return redis.pcall("ZINCRBY", key, args[1], member)
    end
    local prior = redis.pcall("ZSCORE", key, member)
    if is_error(prior) then
        return prior
    end
    local reply = redis.pcall("ZINCRBY", key, args[1], member)
    return reply, function()
        restore_scores(key, { member }, { prior })
    end
end

OPS.zrem = function(keys, args, covered)
    local key = keys[1]
    if covered then
        return redis.pcall("ZREM", key, unpack(args))
    end
    local prior = redis.pcall("ZMSCORE", key, unpack(args))
    if is_error(prior) then
        return prior
    end
    local at = expire_at(key)
    local reply = redis.pcall("ZREM", key, unpack(args))
    return reply, function()
        restore_scores(key, args, prior)
        restore_expire_at(key, at)
    end
end

-- A push is undone by popping as many values from the same end (the list had them on top).
OPS.lpush = function(keys, args, covered)
    local key = keys[1]
    local reply = redis.pcall("LPUSH", key, unpack(args))
    if covered then
        return reply
    end
    return reply, function()
        redis.call("LPOP", key, #args)
    end
end

OPS.rpush = function(keys, args, covered)
    local key = keys[1]
    local reply = redis.pcall("RPUSH", key, unpack(args))
    if covered then
        return reply
    end
    return reply, function()
        redis.call("RPOP", key, #args)
    end
end

-- args: maxlen ("" for none), id, field, value, ...
OPS.xadd = function(keys, args, covered, trims)
    local key = keys[1]
    local command = { "XADD", key }
    for i = 2, #args do
        command[#command + 1] = args[i]
    end
    local info = false
    if not covered and redis.call("EXISTS", key) == 1 then
        info = redis.pcall("XINFO", "STREAM", key)
        if is_error(info) then
            return info
        end
    end
    local id = redis.pcall(unpack(command))
    if is_error(id) then
        return id
    end
    if args[1] ~= "" then
        trims[#trims + 1] = { key, args[1] }
    end
    if covered then
        return id
    end
    return id, function()
        if not info then
            redis.call("DEL", key)
            return
        end
        local counters = {}
        for i = 1, #info, 2 do
            counters[info[i]] = info[i + 1]
        end
        redis.call("XDEL", key, id)
        redis.call("XSETID", key, counters["last-generated-id"],
            "ENTRIESADDED", counters["entries-added"],
            "MAXDELETEDID", counters["max-deleted-entry-id"])
    end
end

OPS.pexpire = function(keys, args, covered)
    local key = keys[1]
    if covered then
        return redis.pcall("PEXPIRE", key, args[1])
    end
    local at = redis.call("PEXPIRETIME", key)
    local reply = redis.pcall("PEXPIRE", key, args[1])
    return reply, function()
        if at == -1 then
            redis.call("PERSIST", key)
        elseif at > 0 then
            redis.call("PEXPIREAT", key, string.format("%d", at))
        end
    end
end

-- Ops undone by snapshots: the engine snapshots every uncovered key before calling these.
local SNAPSHOT_OPS = { set = true, del = true, call = true }

OPS.set = function(keys, args)
    return redis.pcall("SET", keys[1], unpack(args))
end

OPS.del = function(keys)
    return redis.pcall("DEL", unpack(keys))
end

-- args: function name, then the function's own ARGV.
OPS.call = function(keys, args)
    local name = args[1]
    local fn = EFFECT_FUNCTIONS[name]
    if not fn then
        return { err = "ERR unknown effect function '" .. name .. "' (not in consumers/lua/)" }
    end
    local fargs = {}
    for i = 2, #args do
        fargs[#fargs + 1] = args[i]
    end
    local ok, reply = pcall(fn, keys, fargs)
    if not ok then
        return { err = error_text(reply) }
    end
    return reply
end

local marker_ttl_ms = ARGV[3]
local failures_maxlen = ARGV[4]
local failures_ttl_ms = ARGV[5]
local sync_duplicates = ARGV[6] == "1"
local group = ARGV[2]

if ARGV[1] ~= PROTOCOL then
    return redis.error_reply("ERR postbox apply_effects: protocol " .. tostring(ARGV[1]) ..
        " but this script speaks " .. PROTOCOL .. " (client and script versions differ)")
end

-- Error texts that say the deployment is wrong, not the event's data (Redis 7.0: "The user executing
-- the script can't run this command..." / "...can't access at least one of the keys..."; 7.2+:
-- "NOPERM ..."; a user function calling a command scripts may not run).
local CONFIG_ERRORS = {
    "^NOPERM", "can't run this command", "can't access at least one of the keys",
    "[Nn]o permissions to", "not allowed from script",
}

local function is_config_error(message)
    for i = 1, #CONFIG_ERRORS do
        if string.find(message, CONFIG_ERRORS[i]) then
            return true
        end
    end
    return false
end

-- The failure record: event id, group, the failing command (0-based index into the event's
-- commands, as the client numbers them), its op and Redis's error text.
local function record_failure(stream, event_id, number, op, message)
    -- Best effort: a failure stream key holding another type must not turn into a second failure.
    redis.pcall("XADD", stream, "MAXLEN", "~", failures_maxlen, "*",
        "event", event_id, "group", group, "command_index", tostring(number - 1), "op", op, "error", message)
    redis.pcall("PEXPIRE", stream, failures_ttl_ms)
end

-- Whether the event is new (no marker: the current one, or the legacy one), else the marker found.
local function claim(marker, legacy_index)
    if redis.call("EXISTS", marker) == 1 then
        return false, marker
    end
    if legacy_index ~= "0" then
        local legacy = KEYS[tonumber(legacy_index)]
        if redis.call("EXISTS", legacy) == 1 then
            return false, legacy
        end
    end
    return true, nil
end

-- A write ordered after the marker in the AOF that changes nothing (see the header).
local function touch(marker)
    redis.call("SET", marker, "1", "KEEPTTL")
end

local results = {}
local pos = 8
for e = 1, tonumber(ARGV[7]) do
    local event_id = ARGV[pos]
    local marker = KEYS[tonumber(ARGV[pos + 1])]
    local fresh, seen = claim(marker, ARGV[pos + 2])
    local failures = KEYS[tonumber(ARGV[pos + 3])]
    local command_count = tonumber(ARGV[pos + 4])
    pos = pos + 5

    local undo = {}
    local covered = {}
    local trims = {}
    local failed = nil

    for c = 1, command_count do
        local op = ARGV[pos]
        local key_count = tonumber(ARGV[pos + 1])
        local keys = {}
        for i = 1, key_count do
            keys[i] = KEYS[tonumber(ARGV[pos + 1 + i])]
        end
        pos = pos + 2 + key_count
        local arg_count = tonumber(ARGV[pos])
        local args = {}
        for i = 1, arg_count do
            args[i] = ARGV[pos + i]
        end
        pos = pos + 1 + arg_count

        -- A duplicate, or an event that already failed, still walks its commands to reach the next event.
        if fresh and not failed then
            -- The event's last command needs no undo record: a Redis command that fails changes
            -- nothing, and nothing after it can fail (XTRIM and the marker run only on success).
            -- A user function can fail after its own writes, so it is snapshotted even when last.
            local last = c == command_count
            local handler = OPS[op]
            local reply, record
            if not handler then
                reply = { err = "ERR postbox apply_effects: unknown op '" .. tostring(op) .. "'" }
            elseif SNAPSHOT_OPS[op] then
                if op == "call" or not last then
                    for i = 1, key_count do
                        local key = keys[i]
                        if not covered[key] then
                            local ok, restore = pcall(snapshot, key)
                            if not ok then
                                reply = { err = "ERR cannot snapshot " .. key .. " for undo: " .. error_text(restore) }
                                break
                            end
                            undo[#undo + 1] = restore
                            covered[key] = true
                        end
                    end
                end
                if not reply then
                    reply = handler(keys, args)
                end
            else
                reply, record = handler(keys, args, last or covered[keys[1]], trims)
            end
            if is_error(reply) then
                failed = { c, op, reply.err }
            elseif record then
                undo[#undo + 1] = record
            end
        end
    end

    if not fresh then
        if sync_duplicates then
            touch(seen)
        end
        results[e] = { 2 }
    elseif failed then
        local ok, undo_err = pcall(function()
            for i = #undo, 1, -1 do
                undo[i]()
            end
        end)
        if ok and is_config_error(failed[3]) then
            results[e] = { 5, failed[1], failed[2], failed[3] }
            return results
        end
        record_failure(failures, event_id, failed[1], failed[2], failed[3])
        if ok then
            results[e] = { 3, failed[1], failed[2], failed[3] }
        else
            results[e] = { 4, failed[1], failed[2], failed[3], error_text(undo_err) }
        end
    else
        for i = 1, #trims do
            redis.pcall("XTRIM", trims[i][1], "MAXLEN", "~", trims[i][2])
        end
        redis.call("SET", marker, "1", "PX", marker_ttl_ms)
        results[e] = { 1 }
    end
end
return results
