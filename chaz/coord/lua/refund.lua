-- REFUND: undo a reservation whose job was never written: decrement the
-- session's counters and the project's cumulative counter (each only if it
-- exists and is positive), drop the job from the project's live set, and
-- give back the token the reservation spent (if its bucket still exists;
-- a missing bucket is full, and a bucket never holds more than its cap).
--
-- KEYS[1]  chaz:q:{sid}
-- KEYS[2]  chaz:cum:{sid}
-- KEYS[3]  chaz:pjobs:{project}
-- KEYS[4]  chaz:plive:{project}
-- KEYS[5]  chaz:prate:{project}
-- ARGV[1]  the job id the reservation was made for
-- ARGV[2]  '1' if the reservation spent a token of the project's bucket, else '0'
-- Returns: 1
-- uses: decr_positive
decr_positive(KEYS[1])
decr_positive(KEYS[2])
decr_positive(KEYS[3])
redis.call('ZREM', KEYS[4], ARGV[1])
if ARGV[2] == '1' then
  local b = redis.call('HMGET', KEYS[5], 'tokens', 'cap')
  if b[1] then
    redis.call('HSET', KEYS[5], 'tokens', math.min(tonumber(b[2]), tonumber(b[1]) + 1))
  end
end
return 1
