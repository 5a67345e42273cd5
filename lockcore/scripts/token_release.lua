-- token release: compare-and-delete (seed 002, the Lua release step).
-- KEYS[1] lock key; ARGV[1] the holder's token. Returns 1 deleted, 0 not owner.
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
end
return 0
