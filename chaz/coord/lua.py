"""The Lua scripts behind admission and tree capacity (see chaz.coord.keys).

Each script is one atomic step: a check and the counter changes it allows.
Scripts answer ``rebuild`` when a counter they need is missing (Redis was
flushed or the key expired); the caller then restores it from the database
and asks again, so a missing counter is never read as zero.
"""

from __future__ import annotations

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
DECREMENT = """
for _, key in ipairs(KEYS) do
  local v = redis.call('GET', key)
  if v and tonumber(v) > 0 then redis.call('DECR', key) end
end
return 1
"""

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
FINISH = """
redis.call('HDEL', KEYS[1], ARGV[1])
local w = redis.call('ZRANGE', KEYS[2], 0, 0)
if w[1] then
  redis.call('ZREM', KEYS[2], w[1])
  return w[1]
end
return false
"""
