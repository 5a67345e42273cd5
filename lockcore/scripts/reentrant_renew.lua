-- reentrant renew: Redisson's renewExpirationAsync, run by the watchdog every
-- timeout/3. KEYS[1] lock hash; ARGV[1] lease in ms;
-- ARGV[2] owner field. Returns 1 renewed, 0 the lock is gone (lost).
if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
    redis.call('pexpire', KEYS[1], ARGV[1])
    return 1
end
return 0
