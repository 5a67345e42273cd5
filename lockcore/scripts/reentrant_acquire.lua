-- reentrant acquire: Redisson's RedissonLock.tryLockInnerAsync.
-- KEYS[1] lock hash; ARGV[1] lease in ms; ARGV[2] owner field
-- "<instance>:<owner>". Returns nil when acquired (or re-entered), else the
-- holder's remaining PTTL in ms.
if ((redis.call('exists', KEYS[1]) == 0)
        or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
return redis.call('pttl', KEYS[1])
