-- FINISH: a turn left its tree: free its slot and hand it to the session
-- that has waited longest (which stays in the waiting set, marked handed).
--
-- KEYS[1]  chaz:live:{tree}
-- KEYS[2]  chaz:wait:{tree}
-- ARGV[1]  job id
-- Returns: the session to wake, or false (nil) when none waits
-- uses: hand_off
return hand_off(KEYS[1], KEYS[2], ARGV[1])
