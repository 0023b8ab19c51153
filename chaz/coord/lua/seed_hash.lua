-- SEED_HASH: create a live hash only if it does not exist, so that two
-- rebuilders at once do not overwrite each other.
--
-- KEYS[1]     chaz:live:{tree}
-- ARGV[1..n]  field, value, field, value, ... (the sentinel '_' first)
-- Returns:    1 (created) or 0 (it existed; nothing changed)
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
