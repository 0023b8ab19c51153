-- token_debt(key, now): a helper, prepended to the scripts that declare it.
--
-- A project's model-token bucket (docs/coordination.md#tokens-per-minute):
-- the tokens it holds at ``now`` (ms, the Redis clock), refilled at its
-- ``cap`` per minute since it was last written, at most ``cap``; negative
-- while the project is in debt. A missing bucket holds no debt.
--
-- KEYS:    none (the key is an argument)
-- ARGV:    none
-- Returns: the tokens and the refill per ms (nil, nil: no bucket)
local function token_debt(key, now)
  local b = redis.call('HMGET', key, 'tokens', 'at', 'cap')
  if not b[1] then return nil, nil end
  local cap = tonumber(b[3])
  local per_ms = cap / 60000
  return math.min(cap, tonumber(b[1]) + math.max(0, now - tonumber(b[2])) * per_ms), per_ms
end
