-- TURN_STARTED: a turn's start has committed: leave the queue (on the job's
-- first start), announce its Ack, and say whether a cancel is already
-- requested, in one round trip.
--
-- KEYS[1]  chaz:q:{sid}       queued counter
-- KEYS[2]  chaz:cancel:{job}  cancel flag
-- ARGV[1]  dequeued: '1' (decrement the queued counter) or '0'
-- ARGV[2]  chaz:entries:{sid} (the channel)
-- ARGV[3]  the Ack's JSON, '' for none
-- Returns: 1 if the cancel flag exists, else 0
-- uses: decr_positive
if ARGV[1] == '1' then decr_positive(KEYS[1]) end
if ARGV[3] ~= '' then redis.call('PUBLISH', ARGV[2], ARGV[3]) end
return redis.call('EXISTS', KEYS[2])
