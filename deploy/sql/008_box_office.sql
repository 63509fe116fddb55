-- onsale reserve: the box office (issue 19, item 6; docs/api.md "Box office").
--
-- A confirmed booking can be found (by booking id, checkout id, buyer or e-mail),
-- cancelled whole, or refunded one item at a time. Each cancellation or item refund is
-- one row of refunds, written in the same transaction that takes its units out of
-- booking_items (so the units are free in Postgres at once, invariant 1 still enforced
-- by booking_items' primary key), and then driven by the reserve (rsv_office):
--   requested  the record exists, the units are free in Postgres; Redis still marks
--              them sold
--   released   the Redis sold marks and counters were given back (the units are on sale)
--   refunded   the provider confirmed the refund (provider_refund_id)
-- A crash at any step leaves the row in one of these states with its lease lapsing, and
-- the box-office driver resumes it; the provider call carries Idempotency-Key = the
-- refund id, so a repeated call refunds once. Every state a refund passes through is
-- written to refund_transitions (append-only), with the operator and the reason.

ALTER TABLE checkouts ADD COLUMN email text;
-- Not partial: the saga's tests count the partial indexes over checkouts (open ones only).
CREATE INDEX checkouts_email ON checkouts (lower(email));
CREATE INDEX bookings_buyer ON bookings (buyer);
CREATE INDEX bookings_event ON bookings (event_id, created_at);

CREATE TABLE refunds (
    refund_id text PRIMARY KEY,
    booking_id text NOT NULL REFERENCES bookings,
    event_id text NOT NULL REFERENCES events,
    checkout_id text NOT NULL,
    charge_id text NOT NULL,
    whole boolean NOT NULL,          -- the booking's cancellation (every item left)
    units text[] NOT NULL,           -- the seats or pool units it gave back
    amount bigint NOT NULL CHECK (amount >= 0),
    full_charge boolean NOT NULL,    -- the whole charge goes back (the provider is sent 0)
    currency text NOT NULL,
    state text NOT NULL CHECK (state IN ('requested', 'released', 'refunded')),
    provider_refund_id text,
    operator text NOT NULL,
    attempts integer NOT NULL DEFAULT 0,
    lease_until timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
-- One cancellation per booking: a second cancel finds the first.
CREATE UNIQUE INDEX refunds_whole ON refunds (booking_id) WHERE whole;
CREATE INDEX refunds_booking ON refunds (booking_id);
CREATE INDEX refunds_event ON refunds (event_id);
CREATE INDEX refunds_open ON refunds (updated_at) WHERE state <> 'refunded';

CREATE TABLE refund_transitions (
    id bigserial PRIMARY KEY,
    refund_id text NOT NULL,
    from_state text,
    to_state text NOT NULL,
    reason text,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX refund_transitions_refund ON refund_transitions (refund_id, id);

-- onsale_saga_start takes the e-mail (functions.sql); the signature before it goes (a
-- fresh database never had it: functions.sql runs after the migrations).
DROP FUNCTION IF EXISTS onsale_saga_start(text, text, text, text, text, text, bigint, text, integer,
                                        text, text, text, integer, text, text, text);
