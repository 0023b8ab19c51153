-- take_slot(live, waiting, job, session, max_live): a helper, prepended to
-- the scripts that declare it.
--
-- Takes a live slot in a tree for a job: the live hash keeps a sentinel
-- field '_', so a missing hash means "rebuild" and HLEN - 1 is the number
-- of running turns. A job that takes its slot leaves the tree's waiting set.
--
-- KEYS:    none (the hash and the zset are arguments)
-- ARGV:    none
-- Returns: 'rebuild' (the hash is missing), 'held' (the job holds a slot
--          already), 'took' (it holds one now) or 'full' (max_live turns
--          run; -1: no limit)
local function take_slot(live, waiting, job, session, max_live)
  if redis.call('EXISTS', live) == 0 then return 'rebuild' end
  if redis.call('HEXISTS', live, job) == 1 then return 'held' end
  if max_live >= 0 and (redis.call('HLEN', live) - 1) >= max_live then return 'full' end
  redis.call('HSET', live, job, session)
  redis.call('ZREM', waiting, session)
  return 'took'
end
