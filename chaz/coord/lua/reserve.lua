-- RESERVE: count one admission against its session's and its project's
-- quotas, or refuse it. The checks that can never pass again (cumulative)
-- come before those that may pass later (queued, live, rate); the rate
-- comes last, so a token is spent only by an admission that is counted,
-- and the retry_after it answers is the only wait in the way.
--
-- KEYS[1]  chaz:q:{sid}           queued counter
-- KEYS[2]  chaz:cum:{sid}         cumulative counter
-- KEYS[3]  chaz:plive:{project}   the project's unfinished jobs (zset, sentinel '_')
-- KEYS[4]  chaz:pjobs:{project}   the project's cumulative counter
-- KEYS[5]  chaz:prate:{project}   the project's token bucket (hash: tokens, at, cap)
-- ARGV[1]  max queued (-1: no limit)
-- ARGV[2]  max jobs (-1: no limit)
-- ARGV[3]  the counters' TTL in ms
-- ARGV[4]  the project's max live (-1: no limit)
-- ARGV[5]  the project's max jobs (-1: no limit)
-- ARGV[6]  the id the admitted job will take
-- ARGV[7]  the project's turns per minute (-1: no limit): the bucket's
--          size and its refill per minute
-- KEYS[6]  chaz:ptok:{project}   the project's model-token bucket (hash: tokens, at, cap)
-- ARGV[8]  the project's tokens per minute (-1: no limit)
-- Returns: 'rebuild' (a session counter is missing), 'rebuild_project'
--          (a project key is missing; nothing counted in either case),
--          'jobs_exhausted', 'project_jobs', 'queue_full', 'project_live'
--          (nothing counted), {'project_rate', ms until a token is back}
--          (nothing counted, nothing spent), {'project_tokens', ms until
--          its token debt is paid} (nothing counted), or 'ok' (both session
--          counters and the project's counter incremented, the job added
--          to the project's live set scored by the Redis clock, every TTL
--          reset, and with a rate one token spent)
-- uses: bucket token_debt
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('EXISTS', KEYS[2]) == 0 then
  return 'rebuild'
end
if redis.call('EXISTS', KEYS[3]) == 0 or redis.call('EXISTS', KEYS[4]) == 0 then
  return 'rebuild_project'
end
local q = tonumber(redis.call('GET', KEYS[1]))
local c = tonumber(redis.call('GET', KEYS[2]))
local live = redis.call('ZCARD', KEYS[3]) - 1
local pj = tonumber(redis.call('GET', KEYS[4]))
local max_q = tonumber(ARGV[1])
local max_c = tonumber(ARGV[2])
local max_live = tonumber(ARGV[4])
local max_pj = tonumber(ARGV[5])
local rate = tonumber(ARGV[7])
if max_c >= 0 and c >= max_c then return 'jobs_exhausted' end
if max_pj >= 0 and pj >= max_pj then return 'project_jobs' end
if max_q >= 0 and q >= max_q then return 'queue_full' end
if max_live >= 0 and live >= max_live then return 'project_live' end
-- The Redis clock, so that producers on several machines share one bucket.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local tokens, per_ms
if rate >= 0 then
  tokens, per_ms = bucket(KEYS[5], rate, now)
  if tokens < 1 then
    return {'project_rate', math.ceil((1 - tokens) / per_ms)}
  end
end
local token_rate = tonumber(ARGV[8])
if token_rate >= 0 then
  local held, refill = token_debt(KEYS[6], now)
  if held ~= nil and held < 0 then
    return {'project_tokens', math.ceil(-held / refill)}
  end
  -- The bucket's size as set now; a new bucket starts full.
  if held == nil then held = token_rate end
  redis.call('HSET', KEYS[6], 'tokens', math.min(held, token_rate), 'at', now, 'cap', token_rate)
  redis.call('PEXPIRE', KEYS[6], ARGV[3])
end
redis.call('INCR', KEYS[1])
redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
redis.call('ZADD', KEYS[3], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), ARGV[6])
redis.call('INCR', KEYS[4])
redis.call('PEXPIRE', KEYS[3], ARGV[3])
redis.call('PEXPIRE', KEYS[4], ARGV[3])
if rate >= 0 then
  tokens = tokens - 1
  redis.call('HSET', KEYS[5], 'tokens', tokens, 'at', now, 'cap', rate)
  -- Kept until it would be full again: then a missing bucket says the same.
  redis.call('PEXPIRE', KEYS[5], math.ceil((rate - tokens) / per_ms) + 1)
end
return 'ok'
