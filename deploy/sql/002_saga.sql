-- onsale reserve: the checkout saga (DESIGN.md invariants 6-8, issue 4).
--
-- A checkout moves through one committed transition per step:
--   created → hold_extended → payment_requested → paid | declined | unknown
--   paid → converted (booking inserted) → confirmed
--   paid → refunding (the hold expired or a unit was taken) → refunded
--   declined → failed;  unknown → paid | declined | released (the provider, asked by
--   idempotency key, has no charge);  created | hold_extended → released (abandoned)
-- Terminal: confirmed, failed, released, refunded. Every transition is written to
-- checkout_transitions by the trigger of 001, with its reason.

ALTER TABLE checkouts DROP CONSTRAINT checkouts_state_check;
ALTER TABLE checkouts ADD CONSTRAINT checkouts_state_check CHECK (state IN (
    'created', 'converting', 'hold_extended', 'payment_requested', 'paid', 'declined',
    'unknown', 'converted', 'refunding', 'confirmed', 'failed', 'released', 'refunded'));

ALTER TABLE checkouts
    ADD COLUMN payment_source text,
    ADD COLUMN charge_id text,
    ADD COLUMN refund_id text,
    ADD COLUMN refund_reason text,
    ADD COLUMN attempts integer NOT NULL DEFAULT 0;

-- The reconciler's scan: open checkouts whose lease lapsed, oldest first.
CREATE INDEX checkouts_reconcile ON checkouts (updated_at)
    WHERE state NOT IN ('confirmed', 'failed', 'released', 'refunded');

-- Starts or resumes a checkout like onsale_checkout_begin, and also returns what a
-- resumed saga needs (its payment ids and refund reason).
CREATE FUNCTION onsale_saga_begin(p_checkout_id text, p_event text, p_buyer text,
        p_key text, p_hash text, p_hold text, p_amount bigint, p_currency text,
        p_lease_seconds integer, p_source text,
        OUT outcome text, OUT checkout_id text, OUT state text, OUT response_code integer,
        OUT response_body text, OUT charge_id text, OUT refund_id text,
        OUT refund_reason text)
LANGUAGE plpgsql AS $$
DECLARE
    c checkouts%ROWTYPE;
BEGIN
    SELECT b.outcome, b.checkout_id, b.state, b.response_code, b.response_body
      INTO outcome, checkout_id, state, response_code, response_body
      FROM onsale_checkout_begin(p_checkout_id, p_event, p_buyer, p_key, p_hash, p_hold,
                                 p_amount, p_currency, p_lease_seconds) b;
    IF outcome = 'new' THEN
        UPDATE checkouts k SET payment_source = p_source WHERE k.checkout_id = p_checkout_id;
    END IF;
    SELECT * INTO c FROM checkouts k WHERE k.checkout_id = onsale_saga_begin.checkout_id;
    charge_id := c.charge_id;
    refund_id := c.refund_id;
    refund_reason := c.refund_reason;
END $$;

-- One saga transition: from one of p_from to p_to, with the ids and the stored answer
-- it brings (NULL keeps the current value). Terminal states drop the lease; other
-- states renew it when p_lease_seconds is given. Returns the state after the call and
-- whether this call moved it (a concurrent driver may have moved it first).
CREATE FUNCTION onsale_saga_step(p_checkout_id text, p_from text[], p_to text,
        p_reason text, p_charge_id text, p_refund_id text, p_refund_reason text,
        p_code integer, p_body text, p_lease_seconds integer,
        OUT applied boolean, OUT state text)
LANGUAGE plpgsql AS $$
DECLARE
    terminal boolean := p_to IN ('confirmed', 'failed', 'released', 'refunded');
BEGIN
    PERFORM set_config('onsale.reason', p_reason, true);
    UPDATE checkouts c
       SET state = p_to,
           charge_id = COALESCE(p_charge_id, c.charge_id),
           refund_id = COALESCE(p_refund_id, c.refund_id),
           refund_reason = COALESCE(p_refund_reason, c.refund_reason),
           response_code = COALESCE(p_code, c.response_code),
           response_body = COALESCE(p_body, c.response_body),
           lease_until = CASE WHEN terminal THEN NULL
                              WHEN p_lease_seconds IS NOT NULL
                              THEN now() + make_interval(secs => p_lease_seconds)
                              ELSE c.lease_until END,
           updated_at = now()
     WHERE c.checkout_id = p_checkout_id AND c.state = ANY (p_from);
    applied := FOUND;
    SELECT c.state INTO state FROM checkouts c WHERE c.checkout_id = p_checkout_id;
END $$;

-- The booking step of a paid checkout (after the hold was re-checked and its units
-- marked sold in Redis): inserts the booking and its items under UNIQUE (event_id,
-- seat_id) and moves paid → converted, storing the 201 answer, in one transaction.
-- outcome: 'converted' (now or before), 'refunding' (a unit was already booked or the
-- pool has no free unit: the payment must go back), 'state' (not paid: nothing done).
CREATE FUNCTION onsale_saga_book(p_checkout_id text, p_booking_id text, p_pool text,
        p_units text[], p_ok_body text, OUT outcome text, OUT booking_id text)
LANGUAGE plpgsql AS $$
DECLARE
    c checkouts%ROWTYPE;
    n integer;
    want integer;
BEGIN
    SELECT * INTO c FROM checkouts k WHERE k.checkout_id = p_checkout_id FOR UPDATE;
    IF c.state IN ('converted', 'confirmed') THEN
        outcome := 'converted'; booking_id := c.booking_id;
        RETURN;
    END IF;
    IF c.state IS DISTINCT FROM 'paid' THEN
        outcome := 'state';
        RETURN;
    END IF;
    want := cardinality(p_units);
    INSERT INTO bookings (booking_id, event_id, buyer, checkout_id, hold_id, pool_id, quantity,
                          amount, currency)
    VALUES (p_booking_id, c.event_id, c.buyer, c.checkout_id, c.hold_id, p_pool, want,
            c.amount, c.currency);
    IF p_pool IS NULL THEN
        IF EXISTS (SELECT 1 FROM unnest(p_units) u JOIN booking_items b
                     ON b.event_id = c.event_id AND b.seat_id = u) THEN
            RAISE SQLSTATE '23505' USING MESSAGE = 'seat already booked';
        END IF;
        INSERT INTO booking_items (event_id, seat_id, booking_id)
        SELECT c.event_id, u, p_booking_id FROM unnest(p_units) u;
    ELSE
        INSERT INTO booking_items (event_id, seat_id, booking_id)
        SELECT c.event_id, s.seat_id, p_booking_id
          FROM seats s
         WHERE s.event_id = c.event_id AND s.pool_id = p_pool AND s.seat_id = ANY (p_units)
           AND NOT EXISTS (SELECT 1 FROM booking_items b
                            WHERE b.event_id = s.event_id AND b.seat_id = s.seat_id)
        ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS n = ROW_COUNT;
        IF n < want THEN
            -- Only after Redis lost its unit counter: the lowest free units.
            INSERT INTO booking_items (event_id, seat_id, booking_id)
            SELECT c.event_id, s.seat_id, p_booking_id
              FROM seats s
             WHERE s.event_id = c.event_id AND s.pool_id = p_pool
               AND NOT EXISTS (SELECT 1 FROM booking_items b
                                WHERE b.event_id = s.event_id AND b.seat_id = s.seat_id)
             ORDER BY s.unit_no
             LIMIT want - n
            ON CONFLICT DO NOTHING;
            GET DIAGNOSTICS want = ROW_COUNT;
            IF n + want < cardinality(p_units) THEN
                RAISE SQLSTATE 'P0001' USING MESSAGE = 'insufficient';
            END IF;
        END IF;
    END IF;
    PERFORM set_config('onsale.reason', 'hold re-checked in Redis; booking inserted', true);
    UPDATE checkouts k SET state = 'converted', booking_id = p_booking_id, response_code = 201,
           response_body = p_ok_body, updated_at = now()
     WHERE k.checkout_id = p_checkout_id;
    outcome := 'converted'; booking_id := p_booking_id;
EXCEPTION
    WHEN unique_violation THEN
        PERFORM set_config('onsale.reason', 'paid, but a unit was already booked (unique '
                           'constraint): refund', true);
        UPDATE checkouts k SET state = 'refunding', refund_reason = 'seat_unavailable',
               updated_at = now()
         WHERE k.checkout_id = p_checkout_id;
        outcome := 'refunding';
    WHEN raise_exception THEN
        PERFORM set_config('onsale.reason', 'paid, but the pool has no free unit: refund', true);
        UPDATE checkouts k SET state = 'refunding', refund_reason = 'sold_out',
               updated_at = now()
         WHERE k.checkout_id = p_checkout_id;
        outcome := 'refunding';
END $$;

-- The reconciler's claim: up to p_limit open checkouts untouched for p_after_seconds
-- whose lease lapsed, leased to the caller for p_lease_seconds. SKIP LOCKED plus the
-- lease mean several reserve processes never work on the same checkout at once.
CREATE FUNCTION onsale_reconcile_claim(p_after_seconds integer, p_lease_seconds integer,
        p_limit integer)
RETURNS TABLE (checkout_id text, state text, event_id text, buyer text, hold_id text,
               amount bigint, currency text, charge_id text, refund_id text,
               refund_reason text, payment_source text, attempts integer)
LANGUAGE sql AS $$
    UPDATE checkouts c
       SET lease_until = now() + make_interval(secs => p_lease_seconds),
           attempts = c.attempts + 1
     WHERE c.checkout_id IN (
            SELECT k.checkout_id FROM checkouts k
             WHERE k.state NOT IN ('confirmed', 'failed', 'released', 'refunded')
               AND k.updated_at <= now() - make_interval(secs => p_after_seconds)
               AND (k.lease_until IS NULL OR k.lease_until < now())
             ORDER BY k.updated_at
             LIMIT p_limit
               FOR UPDATE SKIP LOCKED)
       AND c.state NOT IN ('confirmed', 'failed', 'released', 'refunded')
       AND (c.lease_until IS NULL OR c.lease_until < now())
    RETURNING c.checkout_id, c.state, c.event_id, c.buyer, c.hold_id, c.amount, c.currency,
              c.charge_id, c.refund_id, c.refund_reason, c.payment_source, c.attempts
$$;

-- Gives a claimed checkout back without a transition (the provider could not answer
-- yet): it is retried after p_retry_seconds.
CREATE FUNCTION onsale_reconcile_defer(p_checkout_id text, p_retry_seconds integer)
RETURNS void LANGUAGE sql AS $$
    UPDATE checkouts c SET lease_until = now() + make_interval(secs => p_retry_seconds)
     WHERE c.checkout_id = p_checkout_id
       AND c.state NOT IN ('confirmed', 'failed', 'released', 'refunded')
$$;
