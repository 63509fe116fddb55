-- done: the buyer says they are finished (POST /v1/events/{event}/done, with their
-- admission token): they stop counting toward the waiting room's max_active now, or,
-- while a hold of theirs lives, when it ends — the rule a release or a confirmation
-- applies (refresh_active). Only the buyer's own entry is touched (the caller takes the
-- buyer from the verified token), and only ever lowered or removed: saying it twice, or
-- after the activity lapsed, changes nothing. A later hold makes the buyer active again
-- while it lives (hold_seats/hold_pool add them), so a fan who comes back is counted.
-- KEYS: 1 buyer zset, 2 active.  ARGV: 1 buyer.
-- Reply: {'OK', until} — until = ms the buyer's activity lapses (a live hold), 0 = no
--        longer active.
local now = now_ms()
refresh_active(KEYS[1], KEYS[2], ARGV[1], now)
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
if score and tonumber(score) > now then
    return {'OK', score}
end
return {'OK', '0'}
