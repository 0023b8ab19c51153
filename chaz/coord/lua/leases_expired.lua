-- LEASES_EXPIRED: claim the sessions whose lease expired without being
-- given back (its holder died, or lost Redis for longer than the lease),
-- each for exactly one caller. A member whose lane is still leased (renewed
-- by a path that did not move its score) gets its score back.
--
-- KEYS[1]  chaz:leases
-- ARGV[1]  the lane key prefix (chaz:lane:)
-- ARGV[2]  at most this many sessions
-- Returns: the claimed session ids (removed from the zset)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
for _, sid in ipairs(due) do
  local ttl = redis.call('PTTL', ARGV[1] .. sid)
  if ttl > 0 then
    redis.call('ZADD', KEYS[1], now + ttl, sid)
  else
    redis.call('ZREM', KEYS[1], sid)
    table.insert(out, sid)
  end
end
return out
