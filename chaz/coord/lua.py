"""The Lua scripts behind admission and tree capacity (see chaz.coord.keys).

Each script is one atomic step: a check and the counter changes it allows.
Scripts answer ``rebuild`` when a counter they need is missing (Redis was
flushed or the key expired); the caller then restores it from the database
and asks again, so a missing counter is never read as zero.
"""

from __future__ import annotations

# Pieces that several scripts share, as Lua local functions prepended to them:
# one definition of each rule, whichever script applies it.

#: Lua ``decr_positive(key)``: decrement a counter that exists and is positive
#: (never creates a key, never goes below zero).
DECR_POSITIVE = """
local function decr_positive(key)
  local v = redis.call('GET', key)
  if v and tonumber(v) > 0 then redis.call('DECR', key) end
end
"""

#: Lua ``lease_is(value, token)``: a lane's value (``TOKEN JOB_ID``) belongs to
#: ``token``. Renewals and releases act only on a lease that passes it.
LEASE_IS = """
local function lease_is(value, token)
  return value and string.sub(value, 1, string.len(token) + 1) == token .. ' '
end
"""

#: Lua ``watch_lease(leases, session, ttl_ms)``: record when a lane's lease
#: expires (on the Redis clock), for the lease watch (chaz.coord.leases).
WATCH_LEASE = """
local function watch_lease(leases, session, ttl_ms)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZADD', leases, now + tonumber(ttl_ms), session)
end
"""

#: Lua ``hand_off(live, waiting, job)``: free the job's live slot and pop the
#: session that has waited longest for one (false when none waits).
HAND_OFF = """
local function hand_off(live, waiting, job)
  redis.call('HDEL', live, job)
  local w = redis.call('ZRANGE', waiting, 0, 0)
  if w[1] then
    redis.call('ZREM', waiting, w[1])
    return w[1]
  end
  return false
end
"""

#: KEYS: queued, cumulative. ARGV: max_queued, max_jobs (-1: no limit), ttl_ms.
RESERVE = """
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('EXISTS', KEYS[2]) == 0 then
  return 'rebuild'
end
local q = tonumber(redis.call('GET', KEYS[1]))
local c = tonumber(redis.call('GET', KEYS[2]))
local max_q = tonumber(ARGV[1])
local max_c = tonumber(ARGV[2])
if max_c >= 0 and c >= max_c then return 'jobs_exhausted' end
if max_q >= 0 and q >= max_q then return 'queue_full' end
redis.call('INCR', KEYS[1])
redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 'ok'
"""

#: Decrement each key that exists and is positive. KEYS: counters.
DECREMENT = (
    DECR_POSITIVE
    + """
for _, key in ipairs(KEYS) do decr_positive(key) end
return 1
"""
)

#: Seed missing counters. KEYS: counters; ARGV: values, then ttl_ms last.
SEED = """
local ttl = ARGV[#ARGV]
for i, key in ipairs(KEYS) do
  if redis.call('SET', key, ARGV[i], 'NX', 'PX', ttl) then end
end
return 1
"""

#: Seed a missing hash. KEYS: the hash. ARGV: field, value, field, value, ...
SEED_HASH = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
"""

#: Start a turn in a tree if it has capacity.
#: KEYS: live hash, waiting zset. ARGV: job id, max_live (-1: none), session id, now (score).
#: The live hash keeps a sentinel field "_" so that a missing hash means "rebuild".
START = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 'rebuild' end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 'ok' end
local max_live = tonumber(ARGV[2])
if max_live >= 0 and (redis.call('HLEN', KEYS[1]) - 1) >= max_live then
  redis.call('ZADD', KEYS[2], 'NX', ARGV[4], ARGV[3])
  return 'wait'
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('ZREM', KEYS[2], ARGV[3])
return 'ok'
"""

#: A turn left its tree: free its slot, hand it to the oldest waiting session.
#: KEYS: live hash, waiting zset. ARGV: job id. Returns the session to wake.
FINISH = HAND_OFF + "return hand_off(KEYS[1], KEYS[2], ARGV[1])\n"

#: A turn has started: leave the queue (on its first start), announce its Ack,
#: and say whether a cancel is already requested, in one round trip.
#: KEYS: queued counter, cancel flag. ARGV: dequeued (1/0), channel, payload ('' = none).
TURN_STARTED = (
    DECR_POSITIVE
    + """
if ARGV[1] == '1' then decr_positive(KEYS[1]) end
if ARGV[3] ~= '' then redis.call('PUBLISH', ARGV[2], ARGV[3]) end
return redis.call('EXISTS', KEYS[2])
"""
)

#: A turn has ended: announce its last entry, clear its cancel flag, free its
#: live slot (handing it to the oldest waiting session), give the lane back,
#: and say how many jobs still wait in the session: one round trip where
#: there were five.
#: KEYS: lane, live hash, waiting zset, cancel flag, queued counter, leases zset.
#: ARGV: token, job id, clear_cancel (1/0), free_slot (1/0), release (1: always, k: keep the
#: lane if jobs wait in the session), channel, payload, lease ttl_ms (to renew a kept lane),
#: session id.
#: Returns {lane, session to wake ('' = none), queued ('-1' = unknown)}, where lane is
#: 1 (released), 0 (kept: still ours) or -1 (not ours any more).
TURN_ENDED = (
    HAND_OFF
    + LEASE_IS
    + WATCH_LEASE
    + """
if ARGV[7] ~= '' then redis.call('PUBLISH', ARGV[6], ARGV[7]) end
if ARGV[3] == '1' then redis.call('DEL', KEYS[4]) end
local woken = ''
if ARGV[4] == '1' then woken = hand_off(KEYS[2], KEYS[3], ARGV[2]) or '' end
local lane = -1
local queued = redis.call('GET', KEYS[5])
if lease_is(redis.call('GET', KEYS[1]), ARGV[1]) then
  if ARGV[5] == '1' or not queued or tonumber(queued) <= 0 then
    redis.call('DEL', KEYS[1])
    redis.call('ZREM', KEYS[6], ARGV[9])
    lane = 1
  else
    redis.call('PEXPIRE', KEYS[1], ARGV[8])
    watch_lease(KEYS[6], ARGV[9], ARGV[8])
    lane = 0
  end
end
return {lane, woken, queued or '-1'}
"""
)
