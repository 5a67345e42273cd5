-- purchase.lua: the lua mode's whole purchase, one atomic step (svc_lua.c).
-- KEYS[1] stock, KEYS[2] sold, KEYS[3] orders, KEYS[4] buyers (a hash
-- user -> orders held), KEYS[5] the Idempotency-Key's record when the
-- request has one (ARGV[4] not empty), KEYS[6] the stock's epoch with
-- ARGV[8]: all miaosha:{sku}:*, one hash slot. (With KEYS[6] but no key,
-- KEYS[5] stands for nothing: the epoch's name again.)
-- ARGV[1]: the order record without its end, `{...,"stock_before":`;
--          the stock read here and `}` complete it.
-- ARGV[2]: the user, "" for none (then not counted)
-- ARGV[3]: purchase.limit_per_user, 0 = unlimited
-- ARGV[4]: this request's in-progress marker (with KEYS[5])
-- ARGV[5], ARGV[6]: the stored outcome of a sale around the stock left,
--          `D|<fingerprint>|200|{...,"stock_left":` and `,...}` (KEYS[5])
-- ARGV[7]: the stored outcome's lifetime, ms (KEYS[5])
-- ARGV[8]: the epoch the stock must carry (KEYS[6]): the reset a one buy
--          per user reservation was counted under, on a SKU split into
--          stock buckets (svc_bucket.h); absent: no check
-- Returns {code, n}:
--   { 1, stock after the sale}  sold: stock-1, sold+1, the order appended,
--                               the buyer counted, the outcome stored
--   { 0, stock}                 sold out, nothing written
--   { 4, 0}                     the stock key does not exist: the SKU was
--                               never stocked (PUT /stock creates it),
--                               nothing written
--   { 2, orders the user holds} the user is at the limit, nothing written
--   { 3, the key's record}      KEYS[5] holds another request's marker or
--                               a stored outcome: nothing written
--   { 5, 0}                     the epoch is not ARGV[8]: the stock was
--                               reset since the reservation, nothing
--                               written
--   {-1, 0}                     the stock key holds a non-integer
--   {-2, 0}                     sold, orders or buyers holds the wrong kind
--                               of value
-- Every check runs before the first write, so the script writes all of
-- its keys or none. A PUT /stock reset cannot come between the read and
-- the writes (a script runs alone), so no epoch is needed for that; only a
-- reservation taken before the script (ARGV[8]) asks which reset the
-- stock belongs to. The order of the
-- checks is the lesson: the duplicate check comes before the
-- decrement, never after.

-- An integer as DECR and INCR take it: canonical, at most 18 digits (so it
-- cannot overflow), else a write would fail after another had applied.
local function int(v)
    local digits = string.gsub(v, '^%-', '')
    return v == '0' or (#digits <= 18 and string.match(v, '^%-?[1-9]%d*$') ~= nil)
end
local keyed = ARGV[4] ~= nil and ARGV[4] ~= ''
if keyed then
    local v = redis.call('GET', KEYS[5])
    if v and v ~= ARGV[4] then
        return {3, v}
    end
end
if ARGV[8] and redis.call('GET', KEYS[6]) ~= ARGV[8] then
    return {5, 0}
end
local s = redis.call('GET', KEYS[1])
if not s then
    return {4, 0}
end
if not int(s) then
    return {-1, 0}
end
local sold = redis.call('GET', KEYS[2])
if sold and not int(sold) then
    return {-2, 0}
end
local t = redis.call('TYPE', KEYS[3])['ok']
if t ~= 'none' and t ~= 'list' then
    return {-2, 0}
end
local user = ARGV[2]
if user ~= '' then -- only a purchase with a user touches the buyers hash
    t = redis.call('TYPE', KEYS[4])['ok']
    if t ~= 'none' and t ~= 'hash' then
        return {-2, 0}
    end
end
local limit = tonumber(ARGV[3])
if user ~= '' and limit > 0 then
    local held = tonumber(redis.call('HGET', KEYS[4], user) or '0') or 0
    if held >= limit then
        return {2, held}
    end
end
if tonumber(s) <= 0 then
    return {0, tonumber(s)}
end
local left = redis.call('DECR', KEYS[1])
redis.call('INCR', KEYS[2])
redis.call('RPUSH', KEYS[3], ARGV[1] .. s .. '}')
if user ~= '' then
    redis.call('HINCRBY', KEYS[4], user, 1)
end
if keyed then
    redis.call('SET', KEYS[5], ARGV[5] .. left .. ARGV[6], 'PX', ARGV[7])
end
return {1, left}
