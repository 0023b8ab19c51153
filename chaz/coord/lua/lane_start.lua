-- LANE_START: take a session's lane lease, as LANE_ACQUIRE does, and with it
-- the live slot of the job the wake-up names, when that needs no limit:
-- the job waits in the session (its queued counter is positive) and no turn
-- of its tree runs. Every live limit is at least 1, so an empty tree has
-- room under any of them; otherwise (or with the hash missing) the slot is
-- left to START, once the turn's setup has read the job and its limit.
--
-- KEYS[1]  chaz:lane:{sid}
-- KEYS[2]  chaz:leases
-- KEYS[3]  chaz:q:{sid}       queued counter
-- KEYS[4]  chaz:live:{tree}   running jobs (job id -> session id)
-- KEYS[5]  chaz:wait:{tree}   sessions waiting for a slot
-- ARGV[1]  the lane's value: TOKEN JOB_ID
-- ARGV[2]  the lease TTL in ms
-- ARGV[3]  session id
-- ARGV[4]  job id
-- Returns: 0 (the lane is held by someone; nothing taken), 1 (the lane is
--          taken, the slot left to START), 2 (the lane and the job's slot
--          are taken) or 3 (the lane is taken; the job held a slot already)
-- uses: watch_lease take_slot
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
watch_lease(KEYS[2], ARGV[3], ARGV[2])
local queued = tonumber(redis.call('GET', KEYS[3]) or '0')
if not queued or queued <= 0 then return 1 end
local got = take_slot(KEYS[4], KEYS[5], ARGV[4], ARGV[3], 1)
if got == 'took' then return 2 end
if got == 'held' then return 3 end
return 1
