-- LANE_ACQUIRE: take a session's lane lease if nobody holds it, and record
-- its expiry for the lease watch.
--
-- KEYS[1]  chaz:lane:{sid}
-- KEYS[2]  chaz:leases
-- ARGV[1]  the value: TOKEN JOB_ID
-- ARGV[2]  the lease TTL in ms
-- ARGV[3]  session id
-- Returns: 1 (taken) or 0 (held by someone)
-- uses: watch_lease
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  watch_lease(KEYS[2], ARGV[3], ARGV[2])
  return 1
end
return 0
