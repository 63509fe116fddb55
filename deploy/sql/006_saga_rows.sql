-- onsale reserve: one row version per commit of a confirmation (issue 9, docs/confirm.md).
--
-- 005 left the commits at three but the checkout row was still written seven times
-- (insert, payment_source, one UPDATE per transition), each UPDATE a new heap tuple with
-- new entries in every index (state and updated_at are indexed: no HOT update). Here:
--   * onsale_saga_start inserts a new checkout directly in the state the extend left it
--     (payment_requested with its payment_source and lease, failed with its answer, or
--     created), one row version, and no nested plpgsql calls;
--   * onsale_saga_book moves paid → confirmed in one UPDATE;
--   * onsale_saga_step takes the state it answers from its UPDATE (RETURNING), reading
--     the row only when it did not move it;
--   * checkouts_open is dropped: no query reads it (the reconciler's claim uses
--     checkouts_reconcile, same predicate), and every non-HOT write paid an entry in it;
--   * checkout_transitions loses its foreign key to checkouts: its only writer is the
--     trigger below, for the row being written, so the key checked nothing but cost a
--     lookup and a row lock per transition. What the key also did — no checkout with an
--     audit trail could be deleted — a trigger now does for every checkout.
-- The audit trail is unchanged, row for row: the trigger of 001 still writes every
-- transition, and a write that passes through intermediate states names them, with their
-- reasons, in the transaction-local setting onsale.via (a text[] literal of state,
-- reason pairs, in order); the trigger writes those hops first, then the row's own
-- (onsale.reason), and clears onsale.via. A write without onsale.via is audited exactly
-- as before.

CREATE OR REPLACE FUNCTION onsale_record_transition() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    prev text;
    via text[];
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF NEW.state IS NOT DISTINCT FROM OLD.state THEN
            RETURN NEW;
        END IF;
        prev := OLD.state;
    END IF;
    via := NULLIF(current_setting('onsale.via', true), '')::text[];
    IF via IS NULL THEN
        INSERT INTO checkout_transitions (checkout_id, from_state, to_state, reason)
        VALUES (NEW.checkout_id, prev, NEW.state, current_setting('onsale.reason', true));
        RETURN NEW;
    END IF;
    PERFORM set_config('onsale.via', '', true);
    -- Hop i goes from the state before it (prev, then via[2i-3]) to via[2i-1] with reason
    -- via[2i]; the last hop (i = k + 1 for k pairs) ends in NEW.state with onsale.reason.
    INSERT INTO checkout_transitions (checkout_id, from_state, to_state, reason)
    SELECT NEW.checkout_id, CASE WHEN i = 1 THEN prev ELSE via[2 * i - 3] END,
           CASE WHEN 2 * i > cardinality(via) THEN NEW.state ELSE via[2 * i - 1] END,
           CASE WHEN 2 * i > cardinality(via) THEN current_setting('onsale.reason', true)
                ELSE via[2 * i] END
      FROM generate_series(1, cardinality(via) / 2 + 1) i
     ORDER BY i;
    RETURN NEW;
END $$;

-- As in 002, the answer from the UPDATE itself.
CREATE OR REPLACE FUNCTION onsale_saga_step(p_checkout_id text, p_from text[], p_to text,
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
     WHERE c.checkout_id = p_checkout_id AND c.state = ANY (p_from)
    RETURNING c.state INTO state;
    applied := FOUND;
    IF NOT applied THEN
        SELECT c.state INTO state FROM checkouts c WHERE c.checkout_id = p_checkout_id;
    END IF;
END $$;

-- Same contract as in 005 (p_to: 'payment_requested', 'failed' or NULL for created);
-- the begin of 001/002 (new / resume / busy / done / mismatch) is inlined.
CREATE OR REPLACE FUNCTION onsale_saga_start(p_checkout_id text, p_event text, p_buyer text,
        p_key text, p_hash text, p_hold text, p_amount bigint, p_currency text,
        p_lease_seconds integer, p_source text, p_to text, p_reason text, p_code integer,
        p_body text,
        OUT outcome text, OUT checkout_id text, OUT state text, OUT response_code integer,
        OUT response_body text, OUT charge_id text, OUT refund_id text,
        OUT refund_reason text)
LANGUAGE plpgsql AS $$
DECLARE
    c checkouts%ROWTYPE;
    st text := COALESCE(p_to, 'created');
    failed boolean := p_to IS NOT DISTINCT FROM 'failed';
    n integer;
BEGIN
    IF p_to = 'payment_requested' THEN
        PERFORM set_config('onsale.via', '{created,"confirm requested",hold_extended,'
                           '"hold extended at checkout start"}', true);
        PERFORM set_config('onsale.reason', 'payment requested', true);
    ELSIF failed THEN
        PERFORM set_config('onsale.via', '{created,"confirm requested"}', true);
        PERFORM set_config('onsale.reason', p_reason, true);
    ELSIF p_to IS NULL THEN
        PERFORM set_config('onsale.reason', 'confirm requested', true);
    ELSE
        RAISE EXCEPTION 'onsale_saga_start: no start in state %', p_to;
    END IF;
    INSERT INTO checkouts (checkout_id, event_id, buyer, idem_key, request_hash, hold_id,
                           state, amount, currency, lease_until, payment_source,
                           response_code, response_body)
    VALUES (p_checkout_id, p_event, p_buyer, p_key, p_hash, p_hold, st, p_amount, p_currency,
            CASE WHEN failed THEN NULL ELSE now() + make_interval(secs => p_lease_seconds) END,
            p_source, CASE WHEN failed THEN p_code END, CASE WHEN failed THEN p_body END)
    ON CONFLICT ON CONSTRAINT checkouts_buyer_idem_key_key DO NOTHING;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n = 1 THEN
        outcome := 'new'; checkout_id := p_checkout_id; state := st;
        IF failed THEN
            response_code := p_code; response_body := p_body;
        END IF;
        RETURN;
    END IF;
    -- Nothing inserted: the path named for it must not describe another row.
    PERFORM set_config('onsale.via', '', true);
    SELECT * INTO c FROM checkouts k WHERE k.buyer = p_buyer AND k.idem_key = p_key FOR UPDATE;
    checkout_id := c.checkout_id; state := c.state;
    charge_id := c.charge_id; refund_id := c.refund_id; refund_reason := c.refund_reason;
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

-- As in 004, with paid → converted → confirmed written as one UPDATE (both transitions
-- still recorded, each with its reason).
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
        PERFORM set_config('onsale.via', '{converted,"hold re-checked in Redis; booking '
                           'inserted"}', true);
        PERFORM set_config('onsale.reason', 'booking confirmed', true);
        UPDATE checkouts k SET state = 'confirmed', booking_id = p_booking_id,
               response_code = 201, response_body = p_ok_body, lease_until = NULL,
               updated_at = now()
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

DROP INDEX checkouts_open;

ALTER TABLE checkout_transitions DROP CONSTRAINT checkout_transitions_checkout_id_fkey;

CREATE FUNCTION onsale_forbid_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'checkouts are never deleted (their audit trail refers to them)';
END $$;
CREATE TRIGGER checkouts_keep BEFORE DELETE ON checkouts
    FOR EACH ROW EXECUTE FUNCTION onsale_forbid_delete();
