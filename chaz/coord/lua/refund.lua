-- REFUND: undo a reservation whose job was never written: decrement the
-- session's counters and the project's cumulative counter (each only if it
-- exists and is positive) and drop the job from the project's live set.
--
-- KEYS[1]  chaz:q:{sid}
-- KEYS[2]  chaz:cum:{sid}
-- KEYS[3]  chaz:pjobs:{project}
-- KEYS[4]  chaz:plive:{project}
-- ARGV[1]  the job id the reservation was made for
-- Returns: 1
-- uses: decr_positive
decr_positive(KEYS[1])
decr_positive(KEYS[2])
decr_positive(KEYS[3])
redis.call('ZREM', KEYS[4], ARGV[1])
return 1
