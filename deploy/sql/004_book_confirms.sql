-- onsale reserve: the booking commits the confirmation (issue 9, docs/confirm.md).
--
-- onsale_saga_book moves a paid checkout paid → converted → confirmed in its one
-- transaction: the booking, its items, the 201 answer and both transitions (written to
-- checkout_transitions by the trigger of 001, each with its reason) commit together, so
-- a crash leaves the checkout either 'paid' (nothing booked: the booking is retried) or
-- 'confirmed'. 'converted' stays a valid state: a checkout left there by an earlier
-- version is still moved on by the saga (converted → confirmed, the stored answer).
--
-- outcome: 'confirmed' (booked now, or before: booking_id says by whom), 'converted'
-- (booked before by an earlier version, not yet confirmed), 'refunding', 'failed',
-- 'state' — as in 003.

CREATE OR REPLACE FUNCTION onsale_saga_book(p_checkout_id text, p_booking_id text, p_pool text,
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
        outcome := c.state; booking_id := c.booking_id;
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
        UPDATE checkouts k SET state = 'converted', booking_id = p_booking_id
         WHERE k.checkout_id = p_checkout_id;
        PERFORM set_config('onsale.reason', 'booking confirmed', true);
        UPDATE checkouts k SET state = 'confirmed', response_code = 201,
               response_body = p_ok_body, lease_until = NULL, updated_at = now()
         WHERE k.checkout_id = p_checkout_id;
        outcome := 'confirmed'; booking_id := p_booking_id;
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
