-- hand_off(live, waiting, job): a helper, prepended to the scripts that
-- declare it.
--
-- Frees the job's live slot and hands it to the session that has waited
-- longest for one. That session stays in the waiting set, marked as handed
-- (its score negated): later hand-offs skip it, and if another session
-- takes the freed slot before it comes, its START puts it back at the
-- place it had instead of at the back. It leaves the set when it takes a
-- slot (take_slot), or through the reconciler once no job of it waits.
--
-- KEYS:    none (the hash and the zset are arguments)
-- ARGV:    none
-- Returns: the handed session id, or false when none waits
local function hand_off(live, waiting, job)
  redis.call('HDEL', live, job)
  local w = redis.call('ZRANGEBYSCORE', waiting, '(0', '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if w[1] then
    redis.call('ZADD', waiting, 'XX', -tonumber(w[2]), w[1])
    return w[1]
  end
  return false
end
