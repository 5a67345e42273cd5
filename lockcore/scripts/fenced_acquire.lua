-- fenced acquire: token's lock and a fencing token in one step (Kleppmann,
-- "How to do distributed locking": a number that grows with every grant,
-- which the store checks before it accepts a write).
-- KEYS[1] lock key; KEYS[2] the caller's fence counter (same hash slot);
-- ARGV[1] the holder's token (a libuuid); ARGV[2] lease in ms.
-- Returns the fencing token (the counter after INCR, >= 1) when acquired,
-- else nil. SET NX PX is spelled EXISTS ... SET PX, the same step in a
-- script, so that a fence key that is not a counter fails INCR before the
-- lock is written: the lock is never taken without its number.
if redis.call('exists', KEYS[1]) == 1 then
    return false
end
local fence = redis.call('incr', KEYS[2])
redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
return fence
