-- UNHAND: forget a session that was handed a slot and has no job waiting
-- any more (its job was cancelled, or it ran elsewhere), so that a later
-- job of it does not come back at that old place.
--
-- KEYS[1]  chaz:wait:{tree}
-- KEYS[2]  chaz:q:{sid}       the session's queued counter
-- ARGV[1]  session id
-- Returns: 1 (forgotten) or 0 (not handed, or a job of it still waits)
local was = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not was or tonumber(was) >= 0 then return 0 end
local queued = tonumber(redis.call('GET', KEYS[2]) or '0')
if queued and queued > 0 then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
return 1
