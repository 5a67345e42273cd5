-- reserve.lua: one buy per user on a SKU split into stock buckets
-- (svc_bucket.c). A user's orders may lie in any bucket, so their count
-- is kept as reservations in the user's home bucket, one per purchase
-- begun and not given back; the check and the increment are one atomic
-- step, whatever the lock mode, so no two clicks can both pass it.
-- KEYS[1] the home bucket's reservations (a hash user -> count), KEYS[2]
-- its epoch: both miaosha:{<sku>~<b>}:*, one hash slot.
-- ARGV[1] the user.
-- ARGV[2] '+', ARGV[3] purchase.limit_per_user: reserve one
--   returns {1, reservations now, epoch}   reserved
--           {0, reservations, epoch}       at the limit: nothing written
-- ARGV[2] '-', ARGV[3] the epoch the reservation saw: give it back
--   returns {1, reservations now}          given back
--           {0, 0}                         the epoch moved (a stock reset
--                                          cleared every reservation since):
--                                          nothing to give back
local epoch = redis.call('GET', KEYS[2]) or ''
if ARGV[2] == '-' then
    if epoch ~= ARGV[3] then
        return {0, 0}
    end
    local n = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
    if n <= 0 then
        redis.call('HDEL', KEYS[1], ARGV[1])
    end
    return {1, n}
end
local held = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0') or 0
if held >= tonumber(ARGV[3]) then
    return {0, held, epoch}
end
return {1, redis.call('HINCRBY', KEYS[1], ARGV[1], 1), epoch}
