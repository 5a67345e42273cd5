-- token extend: compare-and-PEXPIRE.
-- KEYS[1] lock key; ARGV[1] the holder's token; ARGV[2] lease in ms.
-- Returns 1 extended, 0 not owner.
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
