-- TURN_ENDED: a turn's last write has committed: announce its last entry,
-- clear its cancel flag and free its project live slot (the job finished),
-- free its live slot (handing it to the session that
-- has waited longest), give the lane back or keep it, and say how many jobs
-- still wait in the session: one round trip.
--
-- KEYS[1]  chaz:lane:{sid}
-- KEYS[2]  chaz:live:{tree}
-- KEYS[3]  chaz:wait:{tree}
-- KEYS[4]  chaz:cancel:{job}
-- KEYS[5]  chaz:q:{sid}
-- KEYS[6]  chaz:leases
-- KEYS[7]  chaz:inbox:{sid}
-- KEYS[8]  chaz:plive:{project}
-- ARGV[1]  the lease token
-- ARGV[2]  job id
-- ARGV[3]  the job finished (clear its cancel flag, leave the project's
--          live set): '1' or '0'
-- ARGV[4]  free the live slot: '1' or '0'
-- ARGV[5]  '1': release the lane; 'k': keep it if jobs wait in the session
-- ARGV[6]  chaz:entries:{sid} (the channel)
-- ARGV[7]  the last entry's JSON, '' for none
-- ARGV[8]  the lease TTL in ms (to renew a kept lane)
-- ARGV[9]  session id
-- Returns: {lane, session to wake ('' for none), queued ('-1' when the
--          counter is missing), inbox (1 when messages wait in the session's
--          inbox)}, where lane is 1 (released), 0 (kept: still ours) or -1
--          (not ours any more)
-- uses: hand_off lease_is watch_lease
if ARGV[7] ~= '' then redis.call('PUBLISH', ARGV[6], ARGV[7]) end
if ARGV[3] == '1' then
  redis.call('DEL', KEYS[4])
  redis.call('ZREM', KEYS[8], ARGV[2])
end
local woken = ''
if ARGV[4] == '1' then woken = hand_off(KEYS[2], KEYS[3], ARGV[2]) or '' end
local lane = -1
local queued = redis.call('GET', KEYS[5])
if lease_is(redis.call('GET', KEYS[1]), ARGV[1]) then
  if ARGV[5] == '1' or not queued or tonumber(queued) <= 0 then
    redis.call('DEL', KEYS[1])
    redis.call('ZREM', KEYS[6], ARGV[9])
    lane = 1
  else
    redis.call('PEXPIRE', KEYS[1], ARGV[8])
    watch_lease(KEYS[6], ARGV[9], ARGV[8])
    lane = 0
  end
end
return {lane, woken, queued or '-1', redis.call('EXISTS', KEYS[7])}
