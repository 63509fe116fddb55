-- onsale reserve: money is never left behind (issue 7, DESIGN.md invariant 8).
--
-- A checkout that holds money is never terminal except 'confirmed' or 'refunded':
--   * a paid checkout whose booking insert keeps failing (for any reason but the unique
--     constraint or a sold-out pool) goes to 'refunding' after p_max_failures attempts;
--   * a charge found on the provider's ledger whose checkout ended 'released' or
--     'failed' (it landed after the checkout gave up) moves that checkout to
--     'refunding' with the charge id saved, and the reconciler refunds it.
-- The transition table of reserve/rsv_saga.c lists every move; a unit test checks it
-- against this database.

ALTER TABLE checkouts ADD COLUMN book_failures integer NOT NULL DEFAULT 0;

DROP FUNCTION onsale_saga_book(text, text, text, text[], text);

-- The booking step of a paid checkout (after the hold was re-checked and its units
-- marked sold in Redis): inserts the booking and its items under UNIQUE (event_id,
-- seat_id) and moves paid → converted, storing the 201 answer, in one transaction.
-- outcome: 'converted' (now or before); 'refunding' (a unit was already booked, the pool
-- has no free unit, or the insert failed p_max_failures times: the payment must go back;
-- refund_reason says which); 'failed' (the insert failed, detail says why; counted in
-- book_failures, retried later); 'state' (not paid: nothing done).
-- free_units: for 'refunding', the hold's units that Postgres has not booked to anyone
-- (what Redis may give back).
CREATE FUNCTION onsale_saga_book(p_checkout_id text, p_booking_id text, p_pool text,
        p_units text[], p_ok_body text, p_max_failures integer,
        OUT outcome text, OUT booking_id text, OUT refund_reason text, OUT detail text,
        OUT failures integer)
LANGUAGE plpgsql AS $$
DECLARE
    c checkouts%ROWTYPE;
    n integer;
    want integer;
    msg text;
    code text;
BEGIN
    SELECT * INTO c FROM checkouts k WHERE k.checkout_id = p_checkout_id FOR UPDATE;
    failures := c.book_failures;
    IF c.state IN ('converted', 'confirmed') THEN
        outcome := 'converted'; booking_id := c.booking_id;
        RETURN;
    END IF;
    IF c.state IS DISTINCT FROM 'paid' THEN
        outcome := 'state';
        RETURN;
    END IF;
    BEGIN
        want := cardinality(p_units);
        INSERT INTO bookings (booking_id, event_id, buyer, checkout_id, hold_id, pool_id,
                              quantity, amount, currency)
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
        UPDATE checkouts k SET state = 'converted', booking_id = p_booking_id,
               response_code = 201, response_body = p_ok_body, updated_at = now()
         WHERE k.checkout_id = p_checkout_id;
        outcome := 'converted'; booking_id := p_booking_id;
        RETURN;
    EXCEPTION
        WHEN unique_violation THEN
            refund_reason := 'seat_unavailable';
            PERFORM set_config('onsale.reason', 'paid, but a unit was already booked (unique '
                               'constraint): refund', true);
        WHEN raise_exception THEN
            refund_reason := 'sold_out';
            PERFORM set_config('onsale.reason', 'paid, but the pool has no free unit: refund',
                               true);
        WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT, code = RETURNED_SQLSTATE;
            detail := code || ': ' || msg;
            UPDATE checkouts k SET book_failures = k.book_failures + 1
             WHERE k.checkout_id = p_checkout_id
            RETURNING k.book_failures INTO failures;
            IF failures < p_max_failures THEN
                outcome := 'failed';
                RETURN;
            END IF;
            refund_reason := 'booking_failed';
            PERFORM set_config('onsale.reason', format('paid, but the booking failed %s times '
                               '(%s): refund', failures, detail), true);
    END;
    UPDATE checkouts k SET state = 'refunding', refund_reason = onsale_saga_book.refund_reason,
           updated_at = now()
     WHERE k.checkout_id = p_checkout_id;
    outcome := 'refunding';
END $$;

-- Units among p_units (seat ids or numbered pool units) of p_event that no booking holds:
-- what Redis may give back when a converted hold is refunded instead of booked.
CREATE FUNCTION onsale_units_free(p_event text, p_units text[]) RETURNS text[]
LANGUAGE sql STABLE AS $$
    SELECT COALESCE(array_agg(u), '{}') FROM unnest(p_units) u
     WHERE NOT EXISTS (SELECT 1 FROM booking_items b WHERE b.event_id = p_event AND b.seat_id = u)
$$;

-- Reconciliation against the provider's ledger: for each (checkout, charge) of
-- succeeded, unrefunded charges, what the checkout says. A checkout that ended
-- 'released' or 'failed' although the provider holds its money moves to 'refunding'
-- with the charge id (the reconciler refunds it); the transition is written to the
-- audit ledger (checkout_transitions) with the charge id in its reason.
-- outcome: 'refunding' (moved now), 'booked' (confirmed/converted with this charge),
-- 'open' (the saga still runs: it resolves the charge itself), 'mismatch' (terminal with
-- another charge or already refunded: an operator looks), 'unknown' (no such checkout).
CREATE FUNCTION onsale_ledger_check(p_checkouts text[], p_charges text[])
RETURNS TABLE (checkout_id text, charge_id text, outcome text, state text)
LANGUAGE plpgsql AS $$
DECLARE
    c checkouts%ROWTYPE;
BEGIN
    FOR i IN 1 .. COALESCE(cardinality(p_checkouts), 0) LOOP
        checkout_id := p_checkouts[i];
        charge_id := p_charges[i];
        SELECT * INTO c FROM checkouts k WHERE k.checkout_id = p_checkouts[i] FOR UPDATE;
        IF NOT FOUND THEN
            outcome := 'unknown'; state := NULL;
        ELSIF c.state IN ('released', 'failed') THEN
            PERFORM set_config('onsale.reason', format('the provider''s ledger holds charge %s '
                               'of this %s checkout: refund', p_charges[i], c.state), true);
            UPDATE checkouts k SET state = 'refunding', charge_id = p_charges[i],
                   refund_reason = 'late_charge', lease_until = NULL, updated_at = now()
             WHERE k.checkout_id = c.checkout_id;
            outcome := 'refunding'; state := 'refunding';
        ELSIF c.state IN ('confirmed', 'converted') AND c.charge_id = p_charges[i] THEN
            outcome := 'booked'; state := c.state;
        ELSIF c.state IN ('confirmed', 'converted', 'refunded') THEN
            outcome := 'mismatch'; state := c.state;
        ELSE
            outcome := 'open'; state := c.state;
        END IF;
        RETURN NEXT;
    END LOOP;
END $$;
