-- DEBIT_TOKENS: charge the model tokens a turn reported to its project's
-- token bucket (docs/coordination.md#tokens-per-minute). The bucket may go
-- into debt: tokens are known only after a step, so the turn that spends
-- them is never cut by the rate; the project's next admissions are refused
-- (RESERVE, RATE_PEEK) until the debt is paid back by the refill.
--
-- KEYS[1]  chaz:ptok:{project}   the project's token bucket (hash: tokens, at, cap)
-- ARGV[1]  tokens reported (> 0)
-- ARGV[2]  the bucket's TTL in ms
-- Returns: the tokens left (negative: in debt), or false when the project
--          has no bucket (no token rate: nothing to charge)
-- uses: token_debt
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local tokens = token_debt(KEYS[1], now)
if tokens == nil then return false end
tokens = tokens - tonumber(ARGV[1])
redis.call('HSET', KEYS[1], 'tokens', tokens, 'at', now)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return tostring(tokens)
