-- RATE_PEEK: would the project's turn bucket refuse an admission now?
-- Read only: asked before an admission opens its database transaction, so a
-- refusal takes no write lock (docs/coordination.md#a-projects-rate-the-token-bucket).
-- RESERVE checks again inside the transaction and is the one that spends.
--
-- KEYS[1]  chaz:prate:{project}   the project's token bucket (hash: tokens, at, cap)
-- ARGV[1]  the project's turns per minute (> 0)
-- Returns: 'ok', or {'project_rate', ms until a token is back}, exactly as
--          RESERVE would answer at this instant
-- uses: bucket
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local tokens, per_ms = bucket(KEYS[1], tonumber(ARGV[1]), now)
if tokens < 1 then
  return {'project_rate', math.ceil((1 - tokens) / per_ms)}
end
return 'ok'
