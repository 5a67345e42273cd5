-- purchase.lua: the lua mode's whole purchase, one atomic step (svc_lua.c).
-- KEYS[1] stock, KEYS[2] sold, KEYS[3] orders: all miaosha:{sku}:*, one
-- hash slot. ARGV[1]: the order record without its end, `{...,"stock_before":`;
-- the stock read here and `}` complete it.
-- Returns {code, n}:
--   { 1, stock after the sale}  sold: stock-1, sold+1, the order appended
--   { 0, stock (0 when unset)}  sold out, nothing written
--   {-1, 0}                     the stock key holds a non-integer
--   {-2, 0}                     sold or orders holds the wrong kind of value
-- Every check runs before the first write, so the script writes all three
-- keys or none. A PUT /stock reset cannot come between the read and the
-- writes (a script runs alone), so no epoch is needed.
--
-- Later steps fit in front of the stock check, still one atomic step:
--   one buy per user: SADD miaosha:{sku}:buyers <user> (in KEYS) answering
--     0 -> return {2, 0} "already bought";
--   Idempotency-Key: GET miaosha:{sku}:idem:<key> -> when set, return
--     {3, <the stored order>} instead of buying again; after the RPUSH,
--     SET it to the order id with a TTL.

-- An integer as DECR and INCR take it: canonical, at most 18 digits (so it
-- cannot overflow), else a write would fail after another had applied.
local function int(v)
    local digits = string.gsub(v, '^%-', '')
    return v == '0' or (#digits <= 18 and string.match(v, '^%-?[1-9]%d*$') ~= nil)
end
local s = redis.call('GET', KEYS[1])
if not s then
    return {0, 0}
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
if tonumber(s) <= 0 then
    return {0, tonumber(s)}
end
local left = redis.call('DECR', KEYS[1])
redis.call('INCR', KEYS[2])
redis.call('RPUSH', KEYS[3], ARGV[1] .. s .. '}')
return {1, left}
