-- SEED_PROJECT: restore a project's missing quota keys from the database,
-- leaving existing ones alone (an admission may sit between its reservation
-- and its commit: overwriting would forget it).
--
-- KEYS[1]     chaz:plive:{project}
-- KEYS[2]     chaz:pjobs:{project}
-- ARGV[1]     the keys' TTL in ms
-- ARGV[2]     jobs ever admitted in the project
-- ARGV[3..n]  the ids of its unfinished jobs
-- Returns:    1
if redis.call('EXISTS', KEYS[1]) == 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZADD', KEYS[1], 0, '_')
  for i = 3, #ARGV do redis.call('ZADD', KEYS[1], now, ARGV[i]) end
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
redis.call('SET', KEYS[2], ARGV[2], 'NX', 'PX', ARGV[1])
return 1
