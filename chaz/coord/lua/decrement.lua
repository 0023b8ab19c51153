-- DECREMENT: decrement each counter that exists and is positive (a refund,
-- or a job that left the queue).
--
-- KEYS[1..n]  counters (chaz:q:{sid}, chaz:cum:{sid})
-- ARGV:       none
-- Returns:    1
-- uses: decr_positive
for _, key in ipairs(KEYS) do decr_positive(key) end
return 1
