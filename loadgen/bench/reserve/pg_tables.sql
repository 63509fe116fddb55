-- Scratch tables for the pgbench reference of bench_reserve.sh: the rows one confirm
-- writes (deploy/sql/001_reserve.sql: checkouts, bookings, booking_items), with the same
-- keys and unique constraints, without the foreign keys to events/seats.
SET client_min_messages = warning;
DROP TABLE IF EXISTS bench_booking_items, bench_bookings, bench_checkouts;
CREATE TABLE bench_checkouts (
    checkout_id text PRIMARY KEY,
    event_id text NOT NULL,
    buyer text NOT NULL,
    idem_key text NOT NULL,
    request_hash text NOT NULL,
    hold_id text NOT NULL,
    state text NOT NULL,
    amount bigint NOT NULL,
    currency text NOT NULL,
    booking_id text,
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (buyer, idem_key)
);
CREATE TABLE bench_bookings (
    booking_id text PRIMARY KEY,
    event_id text NOT NULL,
    buyer text NOT NULL,
    checkout_id text NOT NULL UNIQUE,
    hold_id text NOT NULL,
    quantity integer NOT NULL,
    amount bigint NOT NULL,
    currency text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE bench_booking_items (
    event_id text NOT NULL,
    seat_id text NOT NULL,
    booking_id text NOT NULL REFERENCES bench_bookings,
    PRIMARY KEY (event_id, seat_id)
);
CREATE INDEX bench_booking_items_booking ON bench_booking_items (booking_id);
