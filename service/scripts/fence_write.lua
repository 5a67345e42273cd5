-- fence_write.lua: the fenced mode's write (svc_fence.c): the lock modes'
-- MULTI (SET stock, INCR sold, RPUSH orders), applied only while the
-- writer's fencing token is still the SKU's high-water mark, i.e. no
-- holder with a larger token has read the stock since this writer did.
-- KEYS[1] high-water mark, KEYS[2] epoch, KEYS[3] stock, KEYS[4] sold,
-- KEYS[5] orders: all miaosha:{sku}:*, one hash slot.
-- ARGV[1] the writer's token; ARGV[2] the epoch its read saw ("" when
-- unset); ARGV[3] the stock to write (the value read, minus one: computed
-- by the service, as the demo's non-atomic read-then-write does); ARGV[4]
-- the order record.
-- Returns
--   {1, mark}   written
--   {0, mark}   fenced out: the mark moved past the writer's token (or a
--               stock reset cleared it); nothing written
--   {-1, 0}     stock reset: PUT /stock bumped the epoch since the read
--               (the lock modes' WATCH epoch, checked here); nothing written
--   {-2, 0}     sold or orders holds the wrong kind of value; nothing
--               written
-- Every check runs before the first write, so the script writes all three
-- keys or none.
local epoch = redis.call('GET', KEYS[2]) or ''
if epoch ~= ARGV[2] then
    return {-1, 0}
end
local mark = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if mark ~= tonumber(ARGV[1]) then
    return {0, mark}
end
local sold = redis.call('GET', KEYS[4])
if sold and not string.match(sold, '^%-?%d+$') then
    return {-2, 0}
end
local t = redis.call('TYPE', KEYS[5])['ok']
if t ~= 'none' and t ~= 'list' then
    return {-2, 0}
end
redis.call('SET', KEYS[3], ARGV[3])
redis.call('INCR', KEYS[4])
redis.call('RPUSH', KEYS[5], ARGV[4])
return {1, mark}
