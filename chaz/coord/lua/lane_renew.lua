-- LANE_RENEW: extend a lane lease only if it is still ours (compare, then
-- act, atomically), and move its expiry in the leases zset.
--
-- KEYS[1]  chaz:lane:{sid}
-- KEYS[2]  chaz:leases
-- ARGV[1]  the lease token
-- ARGV[2]  the lease TTL in ms
-- ARGV[3]  session id
-- Returns: 1 (renewed) or 0 (expired, or another holder's)
-- uses: lease_is watch_lease
if lease_is(redis.call('GET', KEYS[1]), ARGV[1]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  watch_lease(KEYS[2], ARGV[3], ARGV[2])
  return 1
end
return 0
