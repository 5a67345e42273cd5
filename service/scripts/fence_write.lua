-- fence_write.lua: the fenced mode's write (svc_fence.c): the lock modes'
-- MULTI (SET stock, INCR sold, RPUSH orders), applied only while the
-- writer's fencing token is still the SKU's high-water mark, i.e. no
-- holder with a larger token has read the stock since this writer did.
-- KEYS[1] high-water mark, KEYS[2] epoch, KEYS[3] stock, KEYS[4] sold,
-- KEYS[5] orders, KEYS[6] buyers, KEYS[7] the Idempotency-Key's key (left
-- out when there is none): all miaosha:{sku}:*, one hash slot.
-- ARGV[1] the writer's token; ARGV[2] the epoch its read saw ("" when
-- unset); ARGV[3] the stock to write (the value read, minus one: computed
-- by the service, as the demo's non-atomic read-then-write does); ARGV[4]
-- the order record; ARGV[5] the buyer ("" for none: HINCRBY buyers, as the
-- lock modes' MULTI does); ARGV[6] the reply stored under KEYS[7] and
-- ARGV[7] its PX (ms), with the order, so a replay gets exactly it.
-- Returns
--   {1, mark}   written
--   {0, mark}   fenced out: the mark moved past the writer's token (or a
--               stock reset cleared it); nothing written
--   {-1, 0}     stock reset: PUT /stock changed the epoch since the read
--               (the lock modes' WATCH epoch, checked here); nothing written
--   {-2, 0}     sold, orders or buyers holds the wrong kind of value; nothing
--               written
-- Every check runs before the first write, so the script writes all its
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
if ARGV[5] ~= '' then
    t = redis.call('TYPE', KEYS[6])['ok']
    if t ~= 'none' and t ~= 'hash' then
        return {-2, 0}
    end
end
redis.call('SET', KEYS[3], ARGV[3])
redis.call('INCR', KEYS[4])
redis.call('RPUSH', KEYS[5], ARGV[4])
if ARGV[5] ~= '' then
    redis.call('HINCRBY', KEYS[6], ARGV[5], 1)
end
if KEYS[7] then
    redis.call('SET', KEYS[7], ARGV[6], 'PX', ARGV[7])
end
return {1, mark}
