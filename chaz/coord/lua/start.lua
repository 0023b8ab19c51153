-- START: take a live slot in the job's tree, or join the tree's waiting set.
-- The live hash keeps a sentinel field '_', so a missing hash means
-- "rebuild" and HLEN - 1 is the number of running turns.
--
-- KEYS[1]  chaz:live:{tree}   running jobs (job id -> session id)
-- KEYS[2]  chaz:wait:{tree}   sessions waiting for a slot
-- ARGV[1]  job id
-- ARGV[2]  max live (-1: no limit)
-- ARGV[3]  session id
-- ARGV[4]  now (the waiting score)
-- Returns: 'rebuild' (the hash is missing), 'ok' (the job holds a slot,
--          already or now), or 'wait' (the tree is full; the session
--          waits, keeping its first place)
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
