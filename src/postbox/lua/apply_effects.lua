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
-- EVALSHA sha #KEYS key... arg...   (protocol 3)
--   KEYS  in the order the script reads them: the group's failure stream first when it is shared
--         (failures_per_event "0"); then per event: its marker, its legacy marker (when its shape
--         says "l"), its failure stream (when failures_per_event is "1"), then the keys of each
--         of its commands in order. A key may appear more than once.
--   ARGV  header:    protocol, group, marker_ttl_ms, failures_maxlen, failures_ttl_ms,
--                    sync_duplicates ("1": the client sends WAITAOF after this call), event_count,
--                    failures_per_event ("1": each event names its own stream; Redis Cluster),
--                    shape_count, shape...
--         shape:     "<flags> <op> <key_count> <arg_count> <op> <key_count> <arg_count> ..." for
--                    each command of an event. Flags: first "l" (a legacy marker key follows the
--                    marker), "w" (one follows, to be written too when the event is applied) or
--                    "-"; then "r" when the event is a copy an operator replayed on purpose (a
--                    failure verdict in its marker does not bind it). The events of one handler
--                    share one, so each is parsed once a call
--         per event: shape_index (1-based), event_id, then the arguments of each of its commands
--   Values only ever travel in ARGV; no value is part of this source.
--
-- Key layout (made by src/postbox/effects/keys.py, the one place that defines it):
--   marker        <ns>:{<routing tag>}:seen:<group, ':' and '%' escaped>:<event id>  PX ttl
--                 "1" once the event applied; or the group's failure VERDICT on it: "F" (dead
--                 letter owed) or "D" (acknowledged) then "effect\n<index>\n<op>\n<error>" (this
--                 script) or "handler\n<class>\n<error>" (the runtime); src/postbox/effects/verdicts.py.
--                 a function of the consumer group and the event only (never of the effects),
--                 in the slot of the event's routing tag (its aggregate, or the handler's
--                 routing key); the effect keys must be in that slot on Redis Cluster.
--   legacy marker <ns>:{<first effect key's tag, or the event id>}:seen:<group>:<event id>
--                 the layout before the identity change (upgrade transition): read before the
--                 marker and, with flag "w", written beside it when the event is applied, so a
--                 member still on the previous release (a rolling deploy, a rollback) meets it and
--                 takes the redelivered event for a duplicate. The client asks for the write only
--                 where the key is unambiguous (neither the group nor the event id holds ':').
--   failures      <ns>:failures:<group> (single server) or <ns>:{<routing tag>}:failures:<group>
--
-- Duplicates under WAITAOF: WAITAOF waits for the writes of its own connection only. With
-- sync_duplicates, a duplicate rewrites its marker unchanged (SET <marker> 1 KEEPTTL): a write
-- ordered after the marker in the AOF, so the client's WAITAOF covers the marker the duplicate
-- relied on, while its value and TTL (from which `postbox trace` reads its age) stay as they were.
--
-- Reply: { codes, details }. codes: one integer per event, in order; details: four entries
-- (command_number, op, error, undo_error or "") per event whose code is 3, 4 or 5, in order.
--   1  applied (effects and marker written)
--   2  duplicate (marker present, nothing changed)
--   3  failed; what the event changed is undone, the failure is recorded, and its verdict is
--      left in the marker ("F..."): whoever reads the event next (a redelivery, the next owner,
--      a window run) is told it failed instead of running it after the events that follow it
--   4  failed and the undo failed too (undo_error): a bug, the event's keys may be partial;
--      stop and look
--   5  refused by the configuration (an ACL refusal, a command scripts may not run): the same
--      for every event, so not the event's failure. What the event changed is undone, nothing is
--      recorded, and the reply ENDS here: codes stop at this event, later events of the call are
--      not run (the client stops).
--   6  failed earlier: the marker holds the group's verdict (not replayed on purpose); nothing
--      ran. Its details: (0, "", the marker's value, "").
--
-- Marker: an event is claimed with SET <marker> 1 NX PX <ttl> before its commands (one command for
-- the check and the write; after an EXISTS of the legacy marker when there is one): not set means
-- the marker is there and nothing was written: its value (GET) says a duplicate ("1") or a
-- verdict (code 6); if the event then fails, the undo runs and the marker takes its verdict.
-- An event that runs a user function only reads its marker first (GET) and writes it once it
-- succeeded, so a call whose first event's user function spins has written nothing and an
-- operator's SCRIPT KILL can stop it (Redis kills only scripts that have not written).
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

local PROTOCOL = "4"

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

-- Redis's own refusal texts that say the deployment is wrong, not the event's data (Redis 7.0: "The
-- user executing the script can't run this command..." / "...can't access at least one of the
-- keys..."; 7.2+: "NOPERM ..."; a command scripts may not run). Only ever matched against an error
-- reply the server itself gave (redis.pcall's), never against a user function's own message,
-- which may quote the event's data.
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

-- What a user function sees as `redis`: the server's, except that a call the server refuses for
-- the deployment is noted where it happens (user_refused), so the failure is classified by its
-- source, whatever text the function then raises or returns.
local user_refused = false
local function noting(reply)
    if is_error(reply) and is_config_error(tostring(reply.err)) then
        user_refused = true
    end
    return reply
end
local USER_REDIS = setmetatable({
    call = function(...)
        local reply = noting(redis.pcall(...))
        if is_error(reply) then
            error(reply)
        end
        return reply
    end,
    pcall = function(...)
        return noting(redis.pcall(...))
    end,
}, { __index = redis })

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

-- The arguments at ARGV[first], ARGV[first + 2], ... up to ARGV[last].
local function every_other(first, last)
    local out = {}
    for i = first, last, 2 do
        out[#out + 1] = ARGV[i]
    end
    return out
end

-- A fresh table of ARGV[first .. first + count - 1] (for undo records that outlive the call).
local function argv_list(first, count)
    return { unpack(ARGV, first, first + count - 1) }
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

-- Each op: function(k, nk, a, n, record) -> reply, undo, trim. Its keys are KEYS[k .. k + nk - 1]
-- (one for every op but `del` and `call`), its arguments ARGV[a .. a + n - 1]. `record` is true
-- when an undo record is wanted (false: the key already has a snapshot in this event, or this is
-- the event's last command, see Undo in the header); `undo` is nil when there is nothing to undo.
-- `trim` (XADD only) is the MAXLEN to trim the stream to once the event succeeded.
-- A reply that is an error table means the command failed and changed nothing.
local OPS = {}

OPS.hset = function(k, _, a, n, record)
    local key = KEYS[k]
    if not record then
        return redis.pcall("HSET", key, unpack(ARGV, a, a + n - 1))
    end
    local fields = every_other(a, a + n - 1)
    local prior = redis.pcall("HMGET", key, unpack(fields))
    if is_error(prior) then
        return prior
    end
    local reply = redis.pcall("HSET", key, unpack(ARGV, a, a + n - 1))
    return reply, function()
        restore_fields(key, fields, prior)
    end
end

OPS.hincrby = function(k, _, a, _, record)
    local key, field = KEYS[k], ARGV[a]
    if not record then
        return redis.pcall("HINCRBY", key, field, ARGV[a + 1])
    end
    local prior = redis.pcall("HGET", key, field)
    if is_error(prior) then
        return prior
    end
    local reply = redis.pcall("HINCRBY", key, field, ARGV[a + 1])
    return reply, function()
        restore_fields(key, { field }, { prior })
    end
end

OPS.hdel = function(k, _, a, n, record)
    local key = KEYS[k]
    if not record then
        return redis.pcall("HDEL", key, unpack(ARGV, a, a + n - 1))
    end
    local fields = argv_list(a, n)
    local prior = redis.pcall("HMGET", key, unpack(fields))
    if is_error(prior) then
        return prior
    end
    local at = expire_at(key)
    local reply = redis.pcall("HDEL", key, unpack(fields))
    return reply, function()
        restore_fields(key, fields, prior)
        restore_expire_at(key, at)
    end
end

OPS.incrby = function(k, _, a, _, record)
    local key = KEYS[k]
    if not record then
        return redis.pcall("INCRBY", key, ARGV[a])
    end
    local prior = redis.pcall("GET", key)
    if is_error(prior) then
        return prior
    end
    local reply = redis.pcall("INCRBY", key, ARGV[a])
    return reply, function()
        if prior then
            redis.call("SET", key, prior, "KEEPTTL")
        else
            redis.call("DEL", key)
        end
    end
end

OPS.sadd = function(k, _, a, n, record)
    local key = KEYS[k]
    if not record then
        return redis.pcall("SADD", key, unpack(ARGV, a, a + n - 1))
    end
    local members = argv_list(a, n)
    local prior = redis.pcall("SMISMEMBER", key, unpack(members))
    if is_error(prior) then
        return prior
    end
    local reply = redis.pcall("SADD", key, unpack(members))
    return reply, function()
        local added = {}
        for i = 1, #members do
            if prior[i] == 0 then
                added[#added + 1] = members[i]
            end
        end
        if #added > 0 then
            redis.call("SREM", key, unpack(added))
        end
    end
end

OPS.srem = function(k, _, a, n, record)
    local key = KEYS[k]
    if not record then
        return redis.pcall("SREM", key, unpack(ARGV, a, a + n - 1))
    end
    local members = argv_list(a, n)
    local prior = redis.pcall("SMISMEMBER", key, unpack(members))
    if is_error(prior) then
        return prior
    end
    local at = expire_at(key)
    local reply = redis.pcall("SREM", key, unpack(members))
    return reply, function()
        local removed = {}
        for i = 1, #members do
            if prior[i] == 1 then
                removed[#removed + 1] = members[i]
            end
        end
        if #removed > 0 then
            redis.call("SADD", key, unpack(removed))
            restore_expire_at(key, at)
        end
    end
end

-- args: option_count, option..., score, member, score, member...
OPS.zadd = function(k, _, a, n, record)
    local key = KEYS[k]
    local last = a + n - 1
    if not record then
        return redis.pcall("ZADD", key, unpack(ARGV, a + 1, last))
    end
    local members = every_other(a + tonumber(ARGV[a]) + 2, last)
    local prior = redis.pcall("ZMSCORE", key, unpack(members))
    if is_error(prior) then
        return prior
    end
    local reply = redis.pcall("ZADD", key, unpack(ARGV, a + 1, last))
    return reply, function()
        restore_scores(key, members, prior)
    end
end

OPS.zincrby = function(k, _, a, _, record)
    local key, member = KEYS[k], ARGV[a + 1]
    if not record then
        return redis.pcall("ZINCRBY", key, ARGV[a], member)
    end
    local prior = redis.pcall("ZSCORE", key, member)
    if is_error(prior) then
        return prior
    end
    local reply = redis.pcall("ZINCRBY", key, ARGV[a], member)
    return reply, function()
        restore_scores(key, { member }, { prior })
    end
end

OPS.zrem = function(k, _, a, n, record)
    local key = KEYS[k]
    if not record then
        return redis.pcall("ZREM", key, unpack(ARGV, a, a + n - 1))
    end
    local members = argv_list(a, n)
    local prior = redis.pcall("ZMSCORE", key, unpack(members))
    if is_error(prior) then
        return prior
    end
    local at = expire_at(key)
    local reply = redis.pcall("ZREM", key, unpack(members))
    return reply, function()
        restore_scores(key, members, prior)
        restore_expire_at(key, at)
    end
end

-- A push is undone by popping as many values from the same end (the list had them on top).
OPS.lpush = function(k, _, a, n, record)
    local key = KEYS[k]
    local reply = redis.pcall("LPUSH", key, unpack(ARGV, a, a + n - 1))
    if not record then
        return reply
    end
    return reply, function()
        redis.call("LPOP", key, n)
    end
end

OPS.rpush = function(k, _, a, n, record)
    local key = KEYS[k]
    local reply = redis.pcall("RPUSH", key, unpack(ARGV, a, a + n - 1))
    if not record then
        return reply
    end
    return reply, function()
        redis.call("RPOP", key, n)
    end
end

-- args: maxlen ("" for none), id, field, value, ...
OPS.xadd = function(k, _, a, n, record)
    local key = KEYS[k]
    local info = false
    if record and redis.call("EXISTS", key) == 1 then
        info = redis.pcall("XINFO", "STREAM", key)
        if is_error(info) then
            return info
        end
    end
    local id = redis.pcall("XADD", key, unpack(ARGV, a + 1, a + n - 1))
    if is_error(id) then
        return id
    end
    local trim = nil
    if ARGV[a] ~= "" then
        trim = ARGV[a]
    end
    if not record then
        return id, nil, trim
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
    end, trim
end

OPS.pexpire = function(k, _, a, _, record)
    local key = KEYS[k]
    if not record then
        return redis.pcall("PEXPIRE", key, ARGV[a])
    end
    local at = redis.call("PEXPIRETIME", key)
    local reply = redis.pcall("PEXPIRE", key, ARGV[a])
    return reply, function()
        if at == -1 then
            redis.call("PERSIST", key)
        elseif at > 0 then
            redis.call("PEXPIREAT", key, string.format("%d", at))
        end
    end
end

-- Ops undone by snapshots: the engine snapshots every uncovered key before calling these (a set or
-- del that is the event's last command needs none: it changes nothing when it fails).
local SNAPSHOT_OPS = { set = true, del = true, call = true }

OPS.set = function(k, _, a, n)
    return redis.pcall("SET", KEYS[k], unpack(ARGV, a, a + n - 1))
end

OPS.del = function(k, nk)
    return redis.pcall("DEL", unpack(KEYS, k, k + nk - 1))
end

-- args: function name, then the function's own ARGV (its KEYS: the command's keys).
OPS.call = function(k, nk, a, n)
    local name = ARGV[a]
    local fn = EFFECT_FUNCTIONS[name]
    if not fn then
        return { err = "ERR unknown effect function '" .. name .. "' (not in consumers/lua/)" }
    end
    user_refused = false
    local ok, reply = pcall(fn, { unpack(KEYS, k, k + nk - 1) }, argv_list(a + 1, n - 1), USER_REDIS)
    if not ok then
        return { err = error_text(reply), refused = user_refused }
    end
    if is_error(reply) then
        return { err = reply.err, refused = user_refused }
    end
    return reply
end

-- One event shape (ARGV in the header): "<flags> <op> <key count> <arg count> ..." with flags "l"
-- (a legacy marker key follows the marker), "w" (one follows and is written too) or "-". Parsed once per call into its commands and
-- how many KEYS and ARGV the event takes; `calls`: it runs a user function (see claim()).
local function parse_shape(text)
    local shape = { ops = {}, nkeys = {}, nargs = {}, count = 0, keys = 0, args = 0, calls = false }
    local flag = string.sub(text, 1, 1)
    shape.legacy = flag == "l" or flag == "w"
    shape.write_legacy = flag == "w"
    shape.replayed = string.sub(text, 2, 2) == "r"
    for op, nk, n in string.gmatch(text, " (%S+) (%d+) (%d+)") do
        local c = shape.count + 1
        shape.count = c
        shape.ops[c], shape.nkeys[c], shape.nargs[c] = op, tonumber(nk), tonumber(n)
        shape.keys = shape.keys + shape.nkeys[c]
        shape.args = shape.args + shape.nargs[c]
        shape.calls = shape.calls or op == "call"
    end
    return shape
end

if ARGV[1] ~= PROTOCOL then
    return redis.error_reply("ERR postbox apply_effects: protocol " .. tostring(ARGV[1]) ..
        " but this script speaks " .. PROTOCOL .. " (client and script versions differ)")
end

local group = ARGV[2]
local marker_ttl_ms = ARGV[3]
local failures_maxlen = ARGV[4]
local failures_ttl_ms = ARGV[5]
local sync_duplicates = ARGV[6] == "1"
local event_count = tonumber(ARGV[7])
local failures_per_event = ARGV[8] == "1"
local shapes = {}
for s = 1, tonumber(ARGV[9]) do
    shapes[s] = parse_shape(ARGV[9 + s])
end

-- The failure record: event id, group, the failing command (0-based index into the event's
-- commands, as the client numbers them), its op and Redis's error text.
local function record_failure(stream, event_id, number, op, message)
    -- Best effort: a failure stream key holding another type must not turn into a second failure.
    redis.pcall("XADD", stream, "MAXLEN", "~", failures_maxlen, "*",
        "event", event_id, "group", group, "command_index", tostring(number - 1), "op", op, "error", message)
    redis.pcall("PEXPIRE", stream, failures_ttl_ms)
end

-- A marker value that is a failure verdict ("F..." or "D...", see the header), not "1".
local function is_verdict(value)
    local first = string.sub(value, 1, 1)
    return first == "F" or first == "D"
end

-- Whether the event is new; for one that is not, the marker found and its value. The legacy
-- marker (when given) is looked at first, then the current one: claimed at once with SET NX PX
-- (one command; true as the third value: the marker is written and must be replaced if the event
-- fails), or, for an event running a user function, only read (GET; written once the event
-- succeeded), so a call whose user function spins has written nothing before it and SCRIPT KILL
-- can still stop it. A verdict found does not bind a `replayed` copy: it runs (nothing written yet).
local function claim(marker, legacy, read_first, replayed)
    if legacy and redis.call("EXISTS", legacy) == 1 then
        return false, legacy, "1"
    end
    if not read_first and redis.call("SET", marker, "1", "NX", "PX", marker_ttl_ms) then
        return true, nil, nil, true
    end
    local value = redis.call("GET", marker)
    if not value or (replayed and is_verdict(value)) then
        return true, nil, nil, false
    end
    return false, marker, value
end

-- A write ordered after the marker in the AOF that changes nothing (see the header).
local function touch(marker, value)
    redis.call("SET", marker, value, "KEEPTTL")
end

-- The failure verdict this script leaves in a failed event's marker (see the header).
local function effect_verdict(number, op, message)
    return "Feffect\n" .. tostring(number - 1) .. "\n" .. tostring(op) .. "\n" .. string.sub(tostring(message), 1, 2000)
end

-- Snapshot every key of KEYS[k .. k + nk - 1] not yet covered; an error table if a DUMP failed.
local function snapshot_keys(k, nk, undo, covered)
    for i = k, k + nk - 1 do
        local key = KEYS[i]
        if not covered[key] then
            local ok, restore = pcall(snapshot, key)
            if not ok then
                return { err = "ERR cannot snapshot " .. key .. " for undo: " .. error_text(restore) }
            end
            undo[#undo + 1] = restore
            covered[key] = true
        end
    end
    return nil
end

-- Run one command of an event; returns its reply (an error table when it failed).
local function run_command(op, k, nk, a, n, last, undo, covered, trims)
    local handler = OPS[op]
    if not handler then
        return { err = "ERR postbox apply_effects: unknown op '" .. tostring(op) .. "'" }
    end
    if SNAPSHOT_OPS[op] then
        if op == "call" or not last then
            local refused = snapshot_keys(k, nk, undo, covered)
            if refused then
                return refused
            end
        end
        return handler(k, nk, a, n)
    end
    local reply, record, trim = handler(k, nk, a, n, not (last or covered[KEYS[k]]))
    if is_error(reply) then
        return reply -- a failed command changed nothing: there is nothing of it to undo or trim
    end
    if record then
        undo[#undo + 1] = record
    end
    if trim then
        trims[#trims + 1] = { KEYS[k], trim }
    end
    return reply
end

-- Run an event's commands (keys from KEYS[k], arguments from ARGV[a]). nil when all succeeded
-- (stream trims done); else { command_number, op, error, undo_error or false, refused by the
-- deployment }, undone.
local function run_event(shape, k, a)
    local undo, covered, trims = {}, {}, {}
    for c = 1, shape.count do
        local op, nk, n = shape.ops[c], shape.nkeys[c], shape.nargs[c]
        local reply = run_command(op, k, nk, a, n, c == shape.count, undo, covered, trims)
        if is_error(reply) then
            local ok, undo_err = pcall(function()
                for i = #undo, 1, -1 do
                    undo[i]()
                end
            end)
            -- by its source: a user function's own message never decides (see USER_REDIS)
            local refused = reply.refused
            if refused == nil then
                refused = is_config_error(tostring(reply.err))
            end
            return { c, op, reply.err, (not ok) and error_text(undo_err), refused }
        end
        k, a = k + nk, a + n
    end
    for i = 1, #trims do
        redis.pcall("XTRIM", trims[i][1], "MAXLEN", "~", trims[i][2])
    end
    return nil
end

-- A failed event's four entries in the reply's details (see Reply in the header).
local function add_details(details, number, op, message, undo_err)
    local n = #details
    details[n + 1], details[n + 2], details[n + 3], details[n + 4] = number, op, message, undo_err
end

local codes, details = {}, {}
local a = 10 + #shapes
local k = 1
local shared_failures = nil
if not failures_per_event then
    shared_failures, k = KEYS[1], 2
end
for e = 1, event_count do
    local shape = shapes[tonumber(ARGV[a])]
    local event_id = ARGV[a + 1]
    local marker = KEYS[k]
    a, k = a + 2, k + 1
    local legacy, failures = nil, shared_failures
    if shape.legacy then
        legacy, k = KEYS[k], k + 1
    end
    if failures_per_event then
        failures, k = KEYS[k], k + 1
    end

    local fresh, seen, value, claimed = claim(marker, legacy, shape.calls, shape.replayed)
    local failed = nil
    if fresh then
        failed = run_event(shape, k, a)
    end
    k, a = k + shape.keys, a + shape.args

    if not fresh then
        if sync_duplicates then
            touch(seen, value)
        end
        if is_verdict(value) then
            codes[e] = 6
            add_details(details, 0, "", value, "")
        else
            codes[e] = 2
        end
    elseif not failed then
        if not claimed then
            redis.call("SET", marker, "1", "PX", marker_ttl_ms)
        end
        if shape.write_legacy then
            redis.call("SET", legacy, "1", "PX", marker_ttl_ms) -- what the previous release reads
        end
        codes[e] = 1
    else
        local number, op, message, undo_err = failed[1], failed[2], failed[3], failed[4]
        local refused = not undo_err and failed[5]
        if undo_err or refused then
            if claimed then
                redis.call("DEL", marker) -- not the event's verdict (a bug, the deployment): no marker
            end
            if refused then
                codes[e] = 5
                add_details(details, number, op, message, "")
                return { codes, details }
            end
        else
            redis.call("SET", marker, effect_verdict(number, op, message), "PX", marker_ttl_ms)
        end
        record_failure(failures, event_id, number, op, message)
        codes[e] = undo_err and 4 or 3
        add_details(details, number, op, message, undo_err or "")
    end
end
return { codes, details }
