-- decr_positive(key): a helper, prepended to the scripts that declare it.
--
-- Decrements a counter that exists and is positive: never creates a key,
-- never goes below zero.
--
-- KEYS:    none (the key is an argument)
-- ARGV:    none
-- Returns: nothing
local function decr_positive(key)
  local v = redis.call('GET', key)
  if v and tonumber(v) > 0 then redis.call('DECR', key) end
end
