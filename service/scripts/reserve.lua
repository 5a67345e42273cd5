-- reserve.lua: one buy per user on a SKU split into stock buckets
-- (svc_bucket.c). A user's orders may lie in any bucket, so their count
-- is kept as reservations in the user's home bucket, one per purchase
-- begun and not given back; the check and the increment are one atomic
-- step, whatever the lock mode, so no two clicks can both pass it.
-- KEYS[1] the home bucket's reservations (a hash user -> count), KEYS[2]
-- its epoch: both miaosha:{<sku>~<b>}:*, one hash slot.
-- ARGV[1] the user.
-- ARGV[2] '+', ARGV[3] purchase.limit_per_user, ARGV[4] the id of the
-- reset whose layout the purchase follows: reserve one
--   returns {1, reservations now, epoch}   reserved
--           {0, reservations, epoch}       at the limit: nothing written
--           {3, 0, epoch}                  the home bucket's epoch is not
--                                          that reset's id: another reset
--                                          wrote it (or is writing it),
--                                          nothing written
-- A bucket's epoch is the id of the reset that wrote it (svc_stock.c), so
-- a reservation is counted under one reset's layout only, and the sale
-- that follows checks that its bucket carries the same id.
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
if epoch ~= ARGV[4] then
    return {3, 0, epoch}
end
local held = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0') or 0
if held >= tonumber(ARGV[3]) then
    return {0, held, epoch}
end
return {1, redis.call('HINCRBY', KEYS[1], ARGV[1], 1), epoch}
