-- onsale reserve: the outbox of events out to the operator's systems (docs/api.md,
-- "Events out"). A row is written by onsale_outbox_emit in the same transaction as the
-- change it announces, so an event exists exactly when its change committed; the
-- reserve's deliverer (reserve/rsv_outbox.c) POSTs it to events_url, signed, at least
-- once, and marks it delivered.
--   seq              the order of writing; within one key the writers hold the same row
--                    lock (the checkout's, the event's) when they emit, so seq order is
--                    commit order and "every earlier event of the key delivered" is
--                    "every smaller seq of the key delivered"
--   id               the event's id ("evt_" and 32 hex digits), the receiver's dedup key
--   kind             booking.confirmed, checkout.refunded, room.sold_out,
--                    room.phase_changed, booking.cancelled …
--   event_id         the onsale event (room) the change belongs to
--   key              the ordering key: the checkout id for booking.* / checkout.*, the
--                    event id prefixed "room:" for room.*
--   attempts, next_attempt_at, lease_until, last_error   the delivery's state: a
--                    deliverer claims a row by setting lease_until (FOR UPDATE SKIP
--                    LOCKED), a lapsed lease (its reserve died) frees it again
--   delivered_at     set once the receiver answered 2xx; delivered rows are pruned after
--                    events_retention_hours, undelivered rows are never pruned
CREATE TABLE outbox (
    seq bigserial PRIMARY KEY,
    id text NOT NULL UNIQUE DEFAULT 'evt_' || replace(gen_random_uuid()::text, '-', ''),
    kind text NOT NULL CHECK (kind ~ '^[a-z_]{1,32}\.[a-z_]{1,32}$'),
    event_id text NOT NULL,
    key text NOT NULL CHECK (length(key) BETWEEN 1 AND 200),
    payload jsonb NOT NULL CHECK (jsonb_typeof(payload) = 'object'),
    created_at timestamptz NOT NULL DEFAULT now(),
    attempts integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    lease_until timestamptz,
    last_error text,
    delivered_at timestamptz
);
-- What the deliverer claims (undelivered, due) and the per-key "is an earlier one
-- pending?" probe: both over undelivered rows only, which stay few.
CREATE INDEX outbox_due ON outbox (next_attempt_at, seq) WHERE delivered_at IS NULL;
CREATE INDEX outbox_key_pending ON outbox (key, seq) WHERE delivered_at IS NULL;
CREATE INDEX outbox_delivered ON outbox (delivered_at) WHERE delivered_at IS NOT NULL;

-- The units of each event that no booking holds, so that "did this booking take the last
-- one?" (room.sold_out) is an index probe rather than a scan of the event's seats against
-- its bookings (measured on a 50,000-unit event sold in seat order: the scan took 14–155
-- ms per booking as the sale went on, the probe 0.07–0.33 ms). Kept by triggers on seats and booking_items (functions.sql,
-- onsale_free_units_track): a unit is added with its seat, removed when booked, added
-- back when a booking item is deleted (a cancellation), so whatever writes those tables
-- keeps it right. One cool row per free unit, never a hot counter row.
CREATE TABLE free_units (
    event_id text NOT NULL,
    seat_id text NOT NULL,
    PRIMARY KEY (event_id, seat_id)
);
INSERT INTO free_units (event_id, seat_id)
SELECT s.event_id, s.seat_id FROM seats s
 WHERE NOT EXISTS (SELECT 1 FROM booking_items b
                    WHERE b.event_id = s.event_id AND b.seat_id = s.seat_id);
