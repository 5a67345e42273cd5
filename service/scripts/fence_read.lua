-- fence_read.lua: the fenced mode's read of the stock (svc_fence.c). The
-- read goes through the fence as well as the write: it raises the SKU's
-- high-water mark to the reader's fencing token, so that from now on only
-- this reader's write is accepted and every holder with a smaller token is
-- refused, at its read or at its write (docs/locks.md, "Fencing").
-- KEYS[1] fence counter, KEYS[2] high-water mark, KEYS[3] stock,
-- KEYS[4] epoch, KEYS[5] buyers: all miaosha:{sku}:*, one hash slot.
-- ARGV[2] a user ("" for none): their order count is read with the stock,
-- for purchase.limit_per_user.
-- ARGV[1] the reader's fencing token, or "" for the counter's value: the
-- read that rides in the acquire's write runs before its token is known,
-- right after the acquire script; while that lock is held the counter is
-- its token (only a grant increments it, and only a free lock is granted).
-- When that attempt did not get the lock the counter is the holder's
-- token, which the holder's own read raises the mark to anyway.
-- Returns
--   {1, token, stock, epoch, bought}  the mark is now token; stock, epoch
--                             and the user's order count as GET / HGET
--                             answer them (nil when unset or no user)
--   {0, token, mark}          fenced out: a holder with a larger token has
--                             read already; nothing written
local token
if ARGV[1] == '' then
    token = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
else
    token = tonumber(ARGV[1])
end
local mark = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if token < mark then
    return {0, token, mark}
end
if token > mark then
    redis.call('SET', KEYS[2], token)
end
local bought = false
if ARGV[2] ~= '' then
    bought = redis.call('HGET', KEYS[5], ARGV[2])
end
return {1, token, redis.call('GET', KEYS[3]), redis.call('GET', KEYS[4]), bought}
