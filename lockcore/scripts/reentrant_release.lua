-- reentrant release: Redisson's RedissonLock.unlockInnerAsync.
-- KEYS[1] lock hash; KEYS[2] its channel; ARGV[1] the unlock message;
-- ARGV[2] lease in ms; ARGV[3] owner field. Returns nil when the field is
-- absent (not owner), 0 when still held (hold count > 0, lease reset),
-- 1 when deleted and the release published.
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then
    return nil
end
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if (counter > 0) then
    redis.call('pexpire', KEYS[1], ARGV[2])
    return 0
else
    redis.call('del', KEYS[1])
    redis.call('publish', KEYS[2], ARGV[1])
    return 1
end
return nil
