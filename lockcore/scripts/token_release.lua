-- token release: compare-and-delete (the seckill walkthrough's Lua release,
-- docs/locks.md sections 5 and 6).
-- KEYS[1] lock key; ARGV[1] the holder's token. Returns 1 deleted, 0 not owner.
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
end
return 0
