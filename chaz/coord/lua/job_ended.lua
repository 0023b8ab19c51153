-- JOB_ENDED: a job became terminal off the turn path (a cancel of a queued
-- or waiting job, a delivery refused by an archived session): free its
-- project live slot and, if it never started, take it out of the session's
-- queued counter. ZREM of a member already gone is a no-op, so every path
-- that ends the job may say so and the slot is freed exactly once.
--
-- KEYS[1]  chaz:plive:{project}
-- KEYS[2]  chaz:q:{sid}
-- ARGV[1]  job id
-- ARGV[2]  dequeued: '1' (decrement the queued counter) or '0'
-- Returns: 1 if the job was in the live set, else 0
-- uses: decr_positive
if ARGV[2] == '1' then decr_positive(KEYS[2]) end
return redis.call('ZREM', KEYS[1], ARGV[1])
