-- START: take a live slot in the job's tree, or join the tree's waiting set.
--
-- KEYS[1]  chaz:live:{tree}   running jobs (job id -> session id)
-- KEYS[2]  chaz:wait:{tree}   sessions waiting for a slot (score: when they
--                             began to wait; negated once handed a slot)
-- ARGV[1]  job id
-- ARGV[2]  max live (-1: no limit)
-- ARGV[3]  session id
-- ARGV[4]  now (the waiting score)
-- Returns: 'rebuild' (the hash is missing), 'ok' (the job holds a slot,
--          already or now), or 'wait' (the tree is full; the session
--          waits, keeping its first place, also when a slot handed to it
--          was taken by another session first)
-- uses: take_slot
local got = take_slot(KEYS[1], KEYS[2], ARGV[1], ARGV[3], tonumber(ARGV[2]))
if got == 'rebuild' then return 'rebuild' end
if got == 'full' then
  local was = redis.call('ZSCORE', KEYS[2], ARGV[3])
  if not was then
    redis.call('ZADD', KEYS[2], ARGV[4], ARGV[3])
  elseif tonumber(was) < 0 then
    redis.call('ZADD', KEYS[2], -tonumber(was), ARGV[3])
  end
  return 'wait'
end
return 'ok'
