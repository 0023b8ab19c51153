-- bucket(key, rate, now): a helper, prepended to the scripts that declare it.
--
-- The tokens a project's turn bucket holds at ``now`` (ms, the Redis
-- clock): refilled at ``rate`` per minute since it was last written, at
-- most ``rate``; a missing bucket is full. A clock that stepped back (a
-- failover) refills nothing, never drains.
--
-- KEYS:    none (the key is an argument)
-- ARGV:    none
-- Returns: the tokens, and the refill per ms
local function bucket(key, rate, now)
  local per_ms = rate / 60000
  local b = redis.call('HMGET', key, 'tokens', 'at')
  if b[1] then
    return math.min(rate, tonumber(b[1]) + math.max(0, now - tonumber(b[2])) * per_ms), per_ms
  end
  -- No bucket: full. The key expires only once it has refilled (reserve.lua),
  -- and a flush costs at most one extra minute's burst (docs/coordination.md).
  return rate, per_ms
end
