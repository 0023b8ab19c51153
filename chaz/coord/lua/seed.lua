-- SEED: restore missing counters (SET NX PX), leaving existing ones alone.
--
-- KEYS[1..n]    counters (chaz:q:{sid}, chaz:cum:{sid})
-- ARGV[1..n]    their values, in the order of KEYS
-- ARGV[n+1]     the counters' TTL in ms
-- Returns:      1
local ttl = ARGV[#ARGV]
for i, key in ipairs(KEYS) do
  if redis.call('SET', key, ARGV[i], 'NX', 'PX', ttl) then end
end
return 1
