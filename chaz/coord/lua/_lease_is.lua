-- lease_is(value, token): a helper, prepended to the scripts that declare it.
--
-- True if a lane's value (TOKEN JOB_ID) belongs to token. Renewals and
-- releases act only on a lease that passes it.
--
-- KEYS:    none
-- ARGV:    none
-- Returns: a boolean
local function lease_is(value, token)
  return value and string.sub(value, 1, string.len(token) + 1) == token .. ' '
end
