-- onsale reserve: the system of record. Redis holds are the fast path; the
-- constraints here are the guarantee (DESIGN.md invariants 1, 2, 6, 8).

CREATE TABLE events (
    event_id text PRIMARY KEY CHECK (event_id ~ '^[A-Za-z0-9._-]{1,64}$'),
    currency text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    hold_ttl_seconds integer NOT NULL CHECK (hold_ttl_seconds BETWEEN 1 AND 86400),
    checkout_extension_seconds integer NOT NULL CHECK (checkout_extension_seconds BETWEEN 0 AND 86400),
    max_hold_seconds integer NOT NULL CHECK (max_hold_seconds >= hold_ttl_seconds),
    max_per_buyer integer NOT NULL CHECK (max_per_buyer >= 0),
    version bigint NOT NULL DEFAULT 1,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE pools (
    event_id text NOT NULL REFERENCES events ON DELETE CASCADE,
    pool_id text NOT NULL CHECK (pool_id ~ '^[A-Za-z0-9._-]{1,64}$'),
    capacity integer NOT NULL CHECK (capacity BETWEEN 1 AND 1000000),
    price bigint NOT NULL CHECK (price >= 0),
    PRIMARY KEY (event_id, pool_id)
);

-- Every sellable unit: a seat of a section, or a numbered unit of a general-admission
-- pool ('floor#1' … 'floor#<capacity>'). Numbering the units books a pool under the
-- same unique constraint as seats, one cool row per ticket instead of one hot counter
-- row per pool, and makes "never more than capacity" structural: there are exactly
-- capacity units and each is booked at most once.
CREATE TABLE seats (
    event_id text NOT NULL REFERENCES events ON DELETE CASCADE,
    seat_id text NOT NULL,
    section text,
    pool_id text,
    unit_no integer,
    ord integer NOT NULL DEFAULT 0, -- position in the operator's list (seat map order)
    price bigint NOT NULL CHECK (price >= 0),
    PRIMARY KEY (event_id, seat_id),
    FOREIGN KEY (event_id, pool_id) REFERENCES pools ON DELETE CASCADE,
    CHECK ((section IS NULL) <> (pool_id IS NULL)),
    CHECK ((pool_id IS NULL) = (unit_no IS NULL))
);

CREATE TABLE bookings (
    booking_id text PRIMARY KEY,
    event_id text NOT NULL REFERENCES events,
    buyer text NOT NULL,
    checkout_id text NOT NULL UNIQUE,
    hold_id text NOT NULL,
    pool_id text,
    quantity integer NOT NULL CHECK (quantity > 0),
    amount bigint NOT NULL,
    currency text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Invariant 1: a unit is booked at most once. This constraint is the final authority.
CREATE TABLE booking_items (
    event_id text NOT NULL,
    seat_id text NOT NULL,
    booking_id text NOT NULL REFERENCES bookings,
    PRIMARY KEY (event_id, seat_id),
    FOREIGN KEY (event_id, seat_id) REFERENCES seats
);
CREATE INDEX booking_items_booking ON booking_items (booking_id);

-- A purchase attempt, keyed by (buyer, Idempotency-Key). Its state is the saga's state;
-- the stored response is what a replay of the same key answers.
CREATE TABLE checkouts (
    checkout_id text PRIMARY KEY,
    event_id text NOT NULL REFERENCES events,
    buyer text NOT NULL,
    idem_key text NOT NULL,
    request_hash text NOT NULL,
    hold_id text NOT NULL,
    state text NOT NULL CHECK (state IN ('created', 'converting', 'confirmed', 'failed',
                                          'released', 'refunded')),
    amount bigint NOT NULL,
    currency text NOT NULL,
    booking_id text REFERENCES bookings,
    response_code integer,
    response_body text,
    lease_until timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (buyer, idem_key)
);
CREATE INDEX checkouts_open ON checkouts (state, updated_at)
    WHERE state NOT IN ('confirmed', 'failed', 'released', 'refunded');

-- Append-only audit ledger: every state a checkout passed through, and why.
CREATE TABLE checkout_transitions (
    id bigserial PRIMARY KEY,
    checkout_id text NOT NULL REFERENCES checkouts,
    from_state text,
    to_state text NOT NULL,
    reason text,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX checkout_transitions_checkout ON checkout_transitions (checkout_id, id);

CREATE FUNCTION onsale_record_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO checkout_transitions (checkout_id, from_state, to_state, reason)
        VALUES (NEW.checkout_id, NULL, NEW.state, current_setting('onsale.reason', true));
    ELSIF NEW.state IS DISTINCT FROM OLD.state THEN
        INSERT INTO checkout_transitions (checkout_id, from_state, to_state, reason)
        VALUES (NEW.checkout_id, OLD.state, NEW.state, current_setting('onsale.reason', true));
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER checkouts_audit AFTER INSERT OR UPDATE OF state ON checkouts
    FOR EACH ROW EXECUTE FUNCTION onsale_record_transition();

CREATE FUNCTION onsale_forbid_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'checkout_transitions is append-only';
END $$;
CREATE TRIGGER checkout_transitions_append_only BEFORE UPDATE OR DELETE ON checkout_transitions
    FOR EACH ROW EXECUTE FUNCTION onsale_forbid_change();

-- Starts or resumes a checkout for (buyer, idem_key) in one statement.
-- outcome: 'new' (inserted, leased to the caller), 'resume' (open, its lease had
-- lapsed: now leased to the caller), 'busy' (open and leased by another request),
-- 'done' (terminal: replay response_code/response_body), 'mismatch' (same key, other
-- request).
CREATE FUNCTION onsale_checkout_begin(p_checkout_id text, p_event text, p_buyer text,
        p_key text, p_hash text, p_hold text, p_amount bigint, p_currency text,
        p_lease_seconds integer,
        OUT outcome text, OUT checkout_id text, OUT state text, OUT response_code integer,
        OUT response_body text)
LANGUAGE plpgsql AS $$
DECLARE
    c checkouts%ROWTYPE;
BEGIN
    PERFORM set_config('onsale.reason', 'confirm requested', true);
    INSERT INTO checkouts (checkout_id, event_id, buyer, idem_key, request_hash, hold_id,
                           state, amount, currency, lease_until)
    VALUES (p_checkout_id, p_event, p_buyer, p_key, p_hash, p_hold, 'created', p_amount,
            p_currency, now() + make_interval(secs => p_lease_seconds))
    ON CONFLICT ON CONSTRAINT checkouts_buyer_idem_key_key DO NOTHING;
    IF FOUND THEN
        outcome := 'new'; checkout_id := p_checkout_id; state := 'created';
        RETURN;
    END IF;
    SELECT * INTO c FROM checkouts k WHERE k.buyer = p_buyer AND k.idem_key = p_key FOR UPDATE;
    checkout_id := c.checkout_id; state := c.state;
    IF c.request_hash <> p_hash THEN
        outcome := 'mismatch';
    ELSIF c.state IN ('confirmed', 'failed', 'released', 'refunded') THEN
        outcome := 'done'; response_code := c.response_code; response_body := c.response_body;
    ELSIF c.lease_until > now() THEN
        outcome := 'busy';
    ELSE
        UPDATE checkouts k SET lease_until = now() + make_interval(secs => p_lease_seconds),
               updated_at = now()
         WHERE k.checkout_id = c.checkout_id;
        outcome := 'resume';
    END IF;
END $$;

-- Creates or updates an event from the normalised document the reserve builds
-- ({currency, hold_ttl_seconds, …, seats: [[id, section, price]…],
--   pools: [[id, capacity, price]…]}). Settings may always change; the inventory may
-- only be replaced while nothing was sold or is being bought.
-- outcome: 'created', 'replaced' (inventory changed), 'updated' (settings only),
-- 'has_sales' (inventory change refused).
CREATE FUNCTION onsale_event_put(p_event text, p_doc jsonb, OUT outcome text,
        OUT version bigint)
LANGUAGE plpgsql AS $$
DECLARE
    same boolean;
BEGIN
    PERFORM 1 FROM events WHERE event_id = p_event FOR UPDATE;
    IF FOUND THEN
        same := (SELECT COALESCE(jsonb_agg(jsonb_build_array(s.seat_id, s.section, s.price)
                                           ORDER BY s.seat_id), '[]'::jsonb)
                   FROM seats s WHERE s.event_id = p_event AND s.section IS NOT NULL)
                = (SELECT COALESCE(jsonb_agg(x ORDER BY x->>0), '[]'::jsonb)
                     FROM jsonb_array_elements(p_doc->'seats') x)
            AND (SELECT COALESCE(jsonb_agg(jsonb_build_array(p.pool_id, p.capacity, p.price)
                                           ORDER BY p.pool_id), '[]'::jsonb)
                   FROM pools p WHERE p.event_id = p_event)
                = (SELECT COALESCE(jsonb_agg(x ORDER BY x->>0), '[]'::jsonb)
                     FROM jsonb_array_elements(p_doc->'pools') x);
        IF NOT same AND EXISTS (SELECT 1 FROM checkouts c WHERE c.event_id = p_event) THEN
            outcome := 'has_sales';
            SELECT e.version INTO version FROM events e WHERE e.event_id = p_event;
            RETURN;
        END IF;
        UPDATE events e SET currency = p_doc->>'currency',
               hold_ttl_seconds = (p_doc->>'hold_ttl_seconds')::int,
               checkout_extension_seconds = (p_doc->>'checkout_extension_seconds')::int,
               max_hold_seconds = (p_doc->>'max_hold_seconds')::int,
               max_per_buyer = (p_doc->>'max_per_buyer')::int,
               version = e.version + 1, updated_at = now()
         WHERE e.event_id = p_event
        RETURNING e.version INTO version;
        IF same THEN
            outcome := 'updated';
            RETURN;
        END IF;
        DELETE FROM seats WHERE event_id = p_event;
        DELETE FROM pools WHERE event_id = p_event;
        outcome := 'replaced';
    ELSE
        INSERT INTO events (event_id, currency, hold_ttl_seconds, checkout_extension_seconds,
                            max_hold_seconds, max_per_buyer)
        VALUES (p_event, p_doc->>'currency', (p_doc->>'hold_ttl_seconds')::int,
                (p_doc->>'checkout_extension_seconds')::int,
                (p_doc->>'max_hold_seconds')::int, (p_doc->>'max_per_buyer')::int)
        RETURNING events.version INTO version;
        outcome := 'created';
    END IF;
    INSERT INTO seats (event_id, seat_id, section, price, ord)
    SELECT p_event, x->>0, x->>1, (x->>2)::bigint, o
      FROM jsonb_array_elements(p_doc->'seats') WITH ORDINALITY AS t(x, o);
    INSERT INTO pools (event_id, pool_id, capacity, price)
    SELECT p_event, x->>0, (x->>1)::int, (x->>2)::bigint
      FROM jsonb_array_elements(p_doc->'pools') x;
    INSERT INTO seats (event_id, seat_id, pool_id, unit_no, price)
    SELECT p_event, p.pool_id || '#' || g, p.pool_id, g, p.price
      FROM pools p, generate_series(1, p.capacity) g
     WHERE p.event_id = p_event;
END $$;
