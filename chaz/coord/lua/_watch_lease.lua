-- watch_lease(leases, session, ttl_ms): a helper, prepended to the scripts
-- that declare it.
--
-- Records when a lane's lease expires, on the Redis clock, as the session's
-- score in the leases zset, for the lease watch (chaz.lease_watch).
--
-- KEYS:    none (the zset is an argument)
-- ARGV:    none
-- Returns: nothing
local function watch_lease(leases, session, ttl_ms)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZADD', leases, now + tonumber(ttl_ms), session)
end
