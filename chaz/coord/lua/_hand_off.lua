-- hand_off(live, waiting, job): a helper, prepended to the scripts that
-- declare it.
--
-- Frees the job's live slot and pops the session that has waited longest
-- for one.
--
-- KEYS:    none (the hash and the zset are arguments)
-- ARGV:    none
-- Returns: the popped session id, or false when none waits
local function hand_off(live, waiting, job)
  redis.call('HDEL', live, job)
  local w = redis.call('ZRANGE', waiting, 0, 0)
  if w[1] then
    redis.call('ZREM', waiting, w[1])
    return w[1]
  end
  return false
end
