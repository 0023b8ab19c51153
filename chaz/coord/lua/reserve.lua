-- RESERVE: count one admission against a session's quotas, or refuse it.
-- The cumulative check comes first: a session that can never admit again
-- says so rather than "try later".
--
-- KEYS[1]  chaz:q:{sid}     queued counter
-- KEYS[2]  chaz:cum:{sid}   cumulative counter
-- ARGV[1]  max queued (-1: no limit)
-- ARGV[2]  max jobs (-1: no limit)
-- ARGV[3]  the counters' TTL in ms
-- Returns: 'rebuild' (a counter is missing; nothing counted),
--          'jobs_exhausted', 'queue_full' (nothing counted), or 'ok'
--          (both counters incremented, both TTLs reset)
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
