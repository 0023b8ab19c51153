-- RATE_PEEK: would the project's turn bucket refuse an admission now?
-- Read only: asked before an admission opens its database transaction, so a
-- refusal takes no write lock (docs/coordination.md#a-projects-rate-the-token-bucket).
-- RESERVE checks again inside the transaction and is the one that spends.
--
-- KEYS[1]  chaz:prate:{project}   the project's turn bucket (hash: tokens, at, cap)
-- KEYS[2]  chaz:ptok:{project}    the project's model-token bucket
-- ARGV[1]  the project's turns per minute (-1: no limit)
-- ARGV[2]  the project's tokens per minute (-1: no limit)
-- Returns: 'ok', {'project_rate', ms until a token is back} or
--          {'project_tokens', ms until the debt is paid}, exactly as
--          RESERVE would answer at this instant
-- uses: bucket token_debt
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local rate = tonumber(ARGV[1])
if rate >= 0 then
  local tokens, per_ms = bucket(KEYS[1], rate, now)
  if tokens < 1 then
    return {'project_rate', math.ceil((1 - tokens) / per_ms)}
  end
end
if tonumber(ARGV[2]) >= 0 then
  local held, refill = token_debt(KEYS[2], now)
  if held ~= nil and held < 0 then
    return {'project_tokens', math.ceil(-held / refill)}
  end
end
return 'ok'
