-- LANE_RELEASE: give a lane lease back only if it is still ours, and drop
-- it from the leases zset.
--
-- KEYS[1]  chaz:lane:{sid}
-- KEYS[2]  chaz:leases
-- ARGV[1]  the lease token
-- ARGV[2]  session id
-- Returns: 1 (released) or 0 (not ours any more)
-- uses: lease_is
if lease_is(redis.call('GET', KEYS[1]), ARGV[1]) then
  redis.call('DEL', KEYS[1])
  redis.call('ZREM', KEYS[2], ARGV[2])
  return 1
end
return 0
