-- onsale reserve: today's definition of every function and trigger, in one place.
--
-- The numbered files beside this one are the migrations, kept as history: each was applied
-- once, in order, and several redefine functions an earlier one created. This file is what
-- those functions are now. The reserve applies it after the migrations (rsv_pg_migrate),
-- recorded in schema_migrations under "functions.sql@" and a hash of this text: a database
-- gets it once per version of the file, so a fresh database and an upgraded one end with
-- the same definitions, and starting again changes nothing.
--
-- Everything here is CREATE OR REPLACE, so it may run on any database the migrations
-- made. Changing a function: edit it here. A change CREATE OR REPLACE cannot make (other
-- arguments or result columns) also needs a numbered migration that drops the old one;
-- tables, columns, indexes and constraints live only in the migrations.
-- tests/unit/reserve/test_rsv_migrations.c checks that the database's functions are
-- exactly these.

-- --- triggers -------------------------------------------------------------------------

-- The audit trigger of checkouts: every state a checkout passes through, and why, goes to
-- checkout_transitions. The reason is the transaction-local setting onsale.reason. A
-- write that passes through intermediate states names them, with their reasons, in
-- onsale.via (a text[] literal of state, reason pairs, in order): those hops are written
-- first, then the row's own, and onsale.via is cleared.
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

CREATE OR REPLACE TRIGGER checkouts_audit AFTER INSERT OR UPDATE OF state ON checkouts
    FOR EACH ROW EXECUTE FUNCTION onsale_record_transition();

-- checkout_transitions is append-only.
CREATE OR REPLACE FUNCTION onsale_forbid_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'checkout_transitions is append-only';
END $$;

CREATE OR REPLACE TRIGGER checkout_transitions_append_only
    BEFORE UPDATE OR DELETE ON checkout_transitions
    FOR EACH ROW EXECUTE FUNCTION onsale_forbid_change();

-- Checkouts are never deleted: their audit trail refers to them.
CREATE OR REPLACE FUNCTION onsale_forbid_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'checkouts are never deleted (their audit trail refers to them)';
END $$;

CREATE OR REPLACE TRIGGER checkouts_keep BEFORE DELETE ON checkouts
    FOR EACH ROW EXECUTE FUNCTION onsale_forbid_delete();

-- --- events ---------------------------------------------------------------------------

-- Creates or updates an event from the normalised document the reserve builds
-- ({currency, hold_ttl_seconds, …, seats: [[id, section, price, row, position, rank]…],
--   pools: [[id, capacity, price]…]}). Settings may always change; the inventory (ids,
-- sections, prices, pools) may only be replaced while nothing was sold or is being
-- bought. The seats' places and ranks (014_seat_places.sql) steer best available only,
-- so they are updated in place whenever the inventory itself is the same.
-- outcome: 'created', 'replaced' (inventory changed), 'updated' (settings only),
-- 'has_sales' (inventory change refused).
CREATE OR REPLACE FUNCTION onsale_event_put(p_event text, p_doc jsonb, OUT outcome text,
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
                = (SELECT COALESCE(jsonb_agg(jsonb_build_array(x->0, x->1, x->2)
                                           ORDER BY x->>0), '[]'::jsonb)
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
            UPDATE seats s SET seat_row = x->>3, seat_pos = (x->>4)::int, rank = (x->>5)::int
              FROM jsonb_array_elements(p_doc->'seats') x
             WHERE s.event_id = p_event AND s.seat_id = x->>0
               AND (s.seat_row, s.seat_pos, s.rank)
                   IS DISTINCT FROM (x->>3, (x->>4)::int, (x->>5)::int);
            outcome := 'updated';
            PERFORM onsale_event_announce(p_event, outcome, version);
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
    INSERT INTO seats (event_id, seat_id, section, price, ord, seat_row, seat_pos, rank)
    SELECT p_event, x->>0, x->>1, (x->>2)::bigint, o, x->>3, (x->>4)::int, (x->>5)::int
      FROM jsonb_array_elements(p_doc->'seats') WITH ORDINALITY AS t(x, o);
    INSERT INTO pools (event_id, pool_id, capacity, price)
    SELECT p_event, x->>0, (x->>1)::int, (x->>2)::bigint
      FROM jsonb_array_elements(p_doc->'pools') x;
    INSERT INTO seats (event_id, seat_id, pool_id, unit_no, price)
    SELECT p_event, p.pool_id || '#' || g, p.pool_id, g, p.price
      FROM pools p, generate_series(1, p.capacity) g
     WHERE p.event_id = p_event;
    PERFORM onsale_event_announce(p_event, outcome, version);
END $$;

-- --- the checkout saga -------------------------------------------------------------

-- Starts or resumes a checkout for (buyer, p_key) after the reserve extended the buyer's
-- hold in Redis, and records a new one where the extend left it, in one commit (each
-- transition written to checkout_transitions by the audit trigger, with its reason):
--   p_to = 'payment_requested'  created → hold_extended → payment_requested (the hold
--                               was extended and its amount matches; the lease renewed)
--   p_to = 'failed'             created → failed with p_reason and the answer p_code /
--                               p_body (the hold is gone, expired, converted, or its
--                               amount differs)
--   p_to IS NULL                created (the extend's outcome is not known: the saga
--                               extends the hold itself)
-- outcome: 'new' (inserted, leased to the caller), 'resume' (open, its lease had lapsed:
-- now leased to the caller), 'busy' (open and leased by another request), 'done'
-- (terminal: replay response_code/response_body), 'mismatch' (same key, other request).
-- A resumed, busy, done or mismatched checkout is left as it is: the extend's outcome
-- only ever describes a checkout this call inserted.
-- p_request_id / p_admission_request_id: the confirm's request id and its token's rid
-- claim (007), stored with a new checkout; request_id answers the checkout's own (the
-- creating confirm's), which the saga sends in the charge's metadata — a resumed charge
-- must repeat the first one's parameters exactly, or the provider refuses its key.
-- p_email: the buyer's e-mail address the confirm carried (008), or NULL.
CREATE OR REPLACE FUNCTION onsale_saga_start(p_checkout_id text, p_event text, p_buyer text,
        p_key text, p_hash text, p_hold text, p_amount bigint, p_currency text,
        p_lease_seconds integer, p_source text, p_to text, p_reason text, p_code integer,
        p_body text, p_request_id text DEFAULT NULL, p_admission_request_id text DEFAULT NULL,
        p_email text DEFAULT NULL,
        OUT outcome text, OUT checkout_id text, OUT state text, OUT response_code integer,
        OUT response_body text, OUT charge_id text, OUT refund_id text,
        OUT refund_reason text, OUT request_id text)
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
                           response_code, response_body, request_id, admission_request_id,
                           email)
    VALUES (p_checkout_id, p_event, p_buyer, p_key, p_hash, p_hold, st, p_amount, p_currency,
            CASE WHEN failed THEN NULL ELSE now() + make_interval(secs => p_lease_seconds) END,
            p_source, CASE WHEN failed THEN p_code END, CASE WHEN failed THEN p_body END,
            p_request_id, p_admission_request_id, p_email)
    ON CONFLICT ON CONSTRAINT checkouts_buyer_idem_key_key DO NOTHING;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n = 1 THEN
        outcome := 'new'; checkout_id := p_checkout_id; state := st; request_id := p_request_id;
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
    request_id := c.request_id;
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

-- One saga transition: from one of p_from to p_to, with the ids and the stored answer
-- it brings (NULL keeps the current value). Terminal states drop the lease; other
-- states renew it when p_lease_seconds is given. Returns the state after the call and
-- whether this call moved it (a concurrent driver may have moved it first); the state
-- comes from the UPDATE itself, the row is read only when it did not move.
CREATE OR REPLACE FUNCTION onsale_saga_step(p_checkout_id text, p_from text[], p_to text,
        p_reason text, p_charge_id text, p_refund_id text, p_refund_reason text,
        p_code integer, p_body text, p_lease_seconds integer,
        OUT applied boolean, OUT state text)
LANGUAGE plpgsql AS $$
DECLARE
    terminal boolean := p_to IN ('confirmed', 'failed', 'released', 'refunded');
    moved checkouts%ROWTYPE;
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
    RETURNING c.* INTO moved;
    applied := FOUND;
    state := moved.state;
    IF NOT applied THEN
        SELECT k.state INTO state FROM checkouts k WHERE k.checkout_id = p_checkout_id;
    ELSIF p_to = 'refunded' THEN
        -- Announced in this transaction (009_outbox.sql), under the checkout's row lock.
        PERFORM onsale_outbox_emit(moved.event_id, 'checkout.refunded', moved.checkout_id,
            jsonb_build_object('checkout_id', moved.checkout_id, 'event', moved.event_id,
                'buyer', moved.buyer, 'amount', moved.amount, 'currency', moved.currency,
                'charge_id', moved.charge_id, 'refund_id', moved.refund_id,
                'refund_reason', moved.refund_reason, 'booking_id', moved.booking_id));
    END IF;
END $$;

-- The booking step of a charged checkout (after the hold was re-checked and its units
-- marked sold in Redis): inserts the booking and its items under UNIQUE (event_id,
-- seat_id) and moves the checkout to confirmed in one UPDATE, storing the 201 answer, in
-- one transaction. The checkout is 'paid', or (013, docs/confirm.md merge (b)) still
-- 'payment_requested' / 'unknown' / 'converting' / 'requires_action' (a 3-D Secure
-- challenge the buyer passed) with the charge the provider just
-- confirmed in p_charge_id: then the same UPDATE records the charge and passes through
-- paid (payment_requested → paid → converted → confirmed, every transition recorded with
-- its reason). A crash leaves the checkout either as it was (nothing booked: the booking
-- is retried, the provider asked again) or 'confirmed'.
-- outcome: 'confirmed' (booked now, or before: booking_id says by whom); 'converted'
-- (booked before by an earlier version, not yet confirmed); 'refunding' (a unit was
-- already booked, the pool has no free unit, the insert failed p_max_failures times, or
-- the checkout had been released or failed meanwhile and p_charge_id is a late charge —
-- 'late_charge': the payment must go back; refund_reason says which); 'failed' (the
-- insert failed, detail says why; counted in book_failures, the charge recorded as
-- 'paid', retried later); 'state' (nothing to book: nothing done).
CREATE OR REPLACE FUNCTION onsale_saga_book(p_checkout_id text, p_booking_id text, p_pool text,
        p_units text[], p_ok_body text, p_max_failures integer, p_charge_id text,
        OUT outcome text, OUT booking_id text, OUT refund_reason text, OUT detail text,
        OUT failures integer)
LANGUAGE plpgsql AS $$
DECLARE
    c checkouts%ROWTYPE;
    n integer;
    want integer;
    msg text;
    code text;
    -- the hop through paid this transaction records, when the charge was not yet
    via_paid text := '';
BEGIN
    SELECT * INTO c FROM checkouts k WHERE k.checkout_id = p_checkout_id FOR UPDATE;
    failures := c.book_failures;
    IF c.state IN ('converted', 'confirmed') THEN
        outcome := c.state; booking_id := c.booking_id;
        RETURN;
    END IF;
    IF p_charge_id IS NOT NULL AND c.state IN ('released', 'failed') THEN
        PERFORM onsale_saga_late_charge(p_checkout_id, p_charge_id);
        outcome := 'refunding'; refund_reason := 'late_charge';
        RETURN;
    END IF;
    IF c.state IS DISTINCT FROM 'paid' THEN
        IF p_charge_id IS NULL
           OR c.state NOT IN ('payment_requested', 'unknown', 'converting',
                              'requires_action') THEN
            outcome := 'state';
            RETURN;
        END IF;
        via_paid := 'paid,"the provider confirmed the charge",';
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
        PERFORM set_config('onsale.via', '{' || via_paid || 'converted,"hold re-checked in '
                           'Redis; booking inserted"}', true);
        PERFORM set_config('onsale.reason', 'booking confirmed', true);
        UPDATE checkouts k SET state = 'confirmed', booking_id = p_booking_id,
               charge_id = COALESCE(p_charge_id, k.charge_id),
               response_code = 201, response_body = p_ok_body, lease_until = NULL,
               updated_at = now()
         WHERE k.checkout_id = p_checkout_id;
        outcome := 'confirmed'; booking_id := p_booking_id;
        PERFORM onsale_outbox_emit(c.event_id, 'booking.confirmed', c.checkout_id,
            jsonb_build_object('booking_id', p_booking_id, 'checkout_id', c.checkout_id,
                'event', c.event_id, 'buyer', c.buyer, 'pool', p_pool,
                'quantity', cardinality(p_units), 'amount', c.amount, 'currency', c.currency,
                'units', (SELECT jsonb_agg(b.seat_id ORDER BY b.seat_id) FROM booking_items b
                           WHERE b.booking_id = p_booking_id)));
        IF NOT onsale_outbox_units_left(c.event_id) THEN
            PERFORM onsale_outbox_emit(c.event_id, 'room.sold_out', 'room:' || c.event_id,
                jsonb_build_object('event', c.event_id, 'booking_id', p_booking_id));
        END IF;
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
            -- The charge is recorded (paid) with the failure: what is retried is the
            -- booking, never the question to the provider.
            PERFORM set_config('onsale.reason', 'the provider confirmed the charge', true);
            UPDATE checkouts k SET book_failures = k.book_failures + 1, state = 'paid',
                   charge_id = COALESCE(p_charge_id, k.charge_id), updated_at = now()
             WHERE k.checkout_id = p_checkout_id
            RETURNING k.book_failures INTO failures;
            via_paid := '';
            IF failures < p_max_failures THEN
                outcome := 'failed';
                RETURN;
            END IF;
            refund_reason := 'booking_failed';
            PERFORM set_config('onsale.reason', format('paid, but the booking failed %s times '
                               '(%s): refund', failures, detail), true);
    END;
    IF via_paid <> '' THEN
        PERFORM set_config('onsale.via', '{' || rtrim(via_paid, ',') || '}', true);
    END IF;
    UPDATE checkouts k SET state = 'refunding', refund_reason = onsale_saga_book.refund_reason,
           charge_id = COALESCE(p_charge_id, k.charge_id), updated_at = now()
     WHERE k.checkout_id = p_checkout_id;
    outcome := 'refunding';
END $$;

-- Units among p_units (seat ids or numbered pool units) of p_event that no booking holds:
-- what Redis may give back when a converted hold is refunded instead of booked.
CREATE OR REPLACE FUNCTION onsale_units_free(p_event text, p_units text[]) RETURNS text[]
LANGUAGE sql STABLE AS $$
    SELECT COALESCE(array_agg(u), '{}') FROM unnest(p_units) u
     WHERE NOT EXISTS (SELECT 1 FROM booking_items b WHERE b.event_id = p_event AND b.seat_id = u)
$$;

-- --- the reconciler -----------------------------------------------------------------

-- The reconciler's claim: up to p_limit open checkouts untouched for p_after_seconds
-- whose lease lapsed, leased to the caller for p_lease_seconds. SKIP LOCKED plus the
-- lease mean several reserve processes never work on the same checkout at once.
CREATE OR REPLACE FUNCTION onsale_reconcile_claim(p_after_seconds integer, p_lease_seconds integer,
        p_limit integer)
RETURNS TABLE (checkout_id text, state text, event_id text, buyer text, hold_id text,
               amount bigint, currency text, charge_id text, refund_id text,
               refund_reason text, payment_source text, attempts integer)
LANGUAGE sql AS $$
    UPDATE checkouts c
       SET lease_until = now() + make_interval(secs => p_lease_seconds),
           attempts = c.attempts + 1, nudged_at = NULL
     WHERE c.checkout_id IN (
            SELECT k.checkout_id FROM checkouts k
             WHERE k.state NOT IN ('confirmed', 'failed', 'released', 'refunded')
               AND (k.updated_at <= now() - make_interval(secs => p_after_seconds)
                    OR k.nudged_at IS NOT NULL)
               AND (k.lease_until IS NULL OR k.lease_until < now())
             ORDER BY k.nudged_at NULLS LAST, k.updated_at
             LIMIT p_limit
               FOR UPDATE SKIP LOCKED)
       AND c.state NOT IN ('confirmed', 'failed', 'released', 'refunded')
       AND (c.lease_until IS NULL OR c.lease_until < now())
    RETURNING c.checkout_id, c.state, c.event_id, c.buyer, c.hold_id, c.amount, c.currency,
              c.charge_id, c.refund_id, c.refund_reason, c.payment_source, c.attempts
$$;

-- Gives a claimed checkout back without a transition (the provider could not answer
-- yet): it is retried after p_retry_seconds.
CREATE OR REPLACE FUNCTION onsale_reconcile_defer(p_checkout_id text, p_retry_seconds integer)
RETURNS void LANGUAGE sql AS $$
    UPDATE checkouts c SET lease_until = now() + make_interval(secs => p_retry_seconds)
     WHERE c.checkout_id = p_checkout_id
       AND c.state NOT IN ('confirmed', 'failed', 'released', 'refunded')
$$;

-- Reconciliation against the provider's ledger: for each (checkout, charge) of
-- succeeded, unrefunded charges, what the checkout says. A checkout that ended
-- 'released' or 'failed' although the provider holds its money moves to 'refunding'
-- with the charge id (the reconciler refunds it); the transition is written to the
-- audit ledger (checkout_transitions) with the charge id in its reason.
-- outcome: 'refunding' (moved now), 'booked' (confirmed/converted with this charge),
-- 'open' (the saga still runs: it resolves the charge itself), 'mismatch' (terminal with
-- another charge or already refunded: an operator looks), 'unknown' (no such checkout).
CREATE OR REPLACE FUNCTION onsale_ledger_check(p_checkouts text[], p_charges text[])
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

-- One verified provider webhook event (reserve/rsv_webhook.c; 011_provider_events.sql):
-- kept once by its id and acted on in the same transaction, so a replay is 'duplicate'
-- and a crash between keeping and acting cannot happen. p_checkout is the payment's
-- metadata.checkout (NULL when it has none: the checkout is then found by its payment
-- id). A payment that succeeded for a released or failed checkout moves it to refunding,
-- as onsale_ledger_check does; any other open checkout is only made due for the
-- reconciler, whose lookup decides — the event's own word never moves money.
CREATE OR REPLACE FUNCTION onsale_provider_event(p_event_id text, p_type text, p_object text,
        p_checkout text, p_created bigint)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    c checkouts%ROWTYPE;
    result text;
BEGIN
    INSERT INTO provider_events (event_id, type, object_id, checkout_id, outcome,
                                 provider_created)
    VALUES (p_event_id, p_type, p_object, p_checkout, 'not_ours',
            CASE WHEN p_created > 0 THEN to_timestamp(p_created) END)
    ON CONFLICT (event_id) DO NOTHING;
    IF NOT FOUND THEN
        RETURN 'duplicate';
    END IF;
    IF p_checkout IS NOT NULL THEN
        SELECT * INTO c FROM checkouts k WHERE k.checkout_id = p_checkout FOR UPDATE;
    ELSE
        SELECT * INTO c FROM checkouts k WHERE k.charge_id = p_object
         ORDER BY k.created_at DESC LIMIT 1 FOR UPDATE;
    END IF;
    IF NOT FOUND THEN
        result := 'not_ours';
    ELSIF p_type = 'payment_intent.succeeded' AND c.state IN ('released', 'failed') THEN
        PERFORM set_config('onsale.reason', format('the provider''s webhook %s: payment %s '
                           'succeeded for this %s checkout: refund', p_event_id, p_object,
                           c.state), true);
        UPDATE checkouts k SET state = 'refunding', charge_id = p_object,
               refund_reason = 'late_charge', lease_until = NULL, updated_at = now(),
               nudged_at = now()
         WHERE k.checkout_id = c.checkout_id;
        result := 'refunding';
    ELSIF c.state NOT IN ('confirmed', 'failed', 'released', 'refunded') THEN
        UPDATE checkouts k SET nudged_at = now() WHERE k.checkout_id = c.checkout_id;
        result := 'nudged';
    ELSE
        result := 'settled';
    END IF;
    UPDATE provider_events e SET outcome = result, checkout_id = c.checkout_id
     WHERE e.event_id = p_event_id;
    RETURN result;
END $$;

-- --- superseded: no current code calls these; kept for a reserve of an earlier version
-- still running during an upgrade.

-- Starts or resumes a checkout for (buyer, idem_key) in one statement (the first
-- release's begin; the reserve now calls onsale_saga_start).
-- outcome: 'new' (inserted, leased to the caller), 'resume' (open, its lease had
-- lapsed: now leased to the caller), 'busy' (open and leased by another request),
-- 'done' (terminal: replay response_code/response_body), 'mismatch' (same key, other
-- request).
CREATE OR REPLACE FUNCTION onsale_checkout_begin(p_checkout_id text, p_event text, p_buyer text,
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

-- Starts or resumes a checkout like onsale_checkout_begin, and also returns what a
-- resumed saga needs (its payment ids and refund reason). Superseded by
-- onsale_saga_start, which inlines it.
CREATE OR REPLACE FUNCTION onsale_saga_begin(p_checkout_id text, p_event text, p_buyer text,
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

-- --- the box office (008) -----------------------------------------------------------

-- The audit trigger of refunds: every state a refund passes through goes to
-- refund_transitions, with the transaction-local onsale.reason.
CREATE OR REPLACE FUNCTION onsale_record_refund_transition() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.state IS NOT DISTINCT FROM OLD.state THEN
        RETURN NEW;
    END IF;
    INSERT INTO refund_transitions (refund_id, from_state, to_state, reason)
    VALUES (NEW.refund_id, CASE WHEN TG_OP = 'UPDATE' THEN OLD.state END, NEW.state,
            current_setting('onsale.reason', true));
    RETURN NEW;
END $$;

CREATE OR REPLACE TRIGGER refunds_audit AFTER INSERT OR UPDATE OF state ON refunds
    FOR EACH ROW EXECUTE FUNCTION onsale_record_refund_transition();

CREATE OR REPLACE TRIGGER refund_transitions_append_only
    BEFORE UPDATE OR DELETE ON refund_transitions
    FOR EACH ROW EXECUTE FUNCTION onsale_forbid_change();

-- Cancels a booking (p_seat NULL) or refunds one of its items (p_seat: a seat id or a
-- numbered pool unit), in one transaction: the units leave booking_items (free in
-- Postgres at once) and a refund row in state 'requested' records what goes back, leased
-- to the caller for p_lease_seconds. p_ref is a booking id or a checkout id.
-- The amount: the item's price (the last item left: whatever of the booking's amount
-- is not refunded yet, so the refunds always add up to the charge); a cancellation: all
-- that is not refunded yet.
-- outcome: 'created' (refund_id is new, leased to the caller); 'exists' (the booking was
-- cancelled before: refund_id is that cancellation, not leased); 'unknown' (no such
-- booking or checkout); 'not_confirmed' (the checkout has no confirmed booking);
-- 'already_refunded' (the item, or every item, was refunded); 'unknown_item' (not an
-- item of this booking).
CREATE OR REPLACE FUNCTION onsale_office_cancel(p_ref text, p_seat text, p_operator text,
        p_lease_seconds integer, OUT outcome text, OUT refund_id text, OUT booking_id text)
LANGUAGE plpgsql AS $$
DECLARE
    bk bookings%ROWTYPE;
    co checkouts%ROWTYPE;
    r refunds%ROWTYPE;
    u text[];
    amt bigint;
    done bigint;
    left_n integer;
    sold_out boolean;
BEGIN
    SELECT * INTO bk FROM bookings b WHERE b.booking_id = p_ref FOR UPDATE;
    IF NOT FOUND THEN
        SELECT * INTO bk FROM bookings b WHERE b.checkout_id = p_ref FOR UPDATE;
    END IF;
    IF NOT FOUND THEN
        outcome := CASE WHEN EXISTS (SELECT 1 FROM checkouts c WHERE c.checkout_id = p_ref)
                        THEN 'not_confirmed' ELSE 'unknown' END;
        RETURN;
    END IF;
    booking_id := bk.booking_id;
    SELECT * INTO co FROM checkouts c WHERE c.checkout_id = bk.checkout_id;
    IF co.state IS DISTINCT FROM 'confirmed' THEN
        outcome := 'not_confirmed';
        RETURN;
    END IF;
    SELECT * INTO r FROM refunds f WHERE f.booking_id = bk.booking_id AND f.whole;
    IF FOUND AND p_seat IS NULL THEN
        outcome := 'exists'; refund_id := r.refund_id;
        RETURN;
    END IF;
    done := (SELECT COALESCE(sum(f.amount), 0) FROM refunds f WHERE f.booking_id = bk.booking_id);
    left_n := (SELECT count(*) FROM booking_items i WHERE i.booking_id = bk.booking_id);
    IF p_seat IS NULL THEN
        u := (SELECT array_agg(i.seat_id ORDER BY i.seat_id) FROM booking_items i
               WHERE i.booking_id = bk.booking_id);
        amt := bk.amount - done;
    ELSE
        IF NOT EXISTS (SELECT 1 FROM booking_items i WHERE i.booking_id = bk.booking_id
                          AND i.event_id = bk.event_id AND i.seat_id = p_seat) THEN
            outcome := CASE WHEN EXISTS (SELECT 1 FROM refunds f
                                          WHERE f.booking_id = bk.booking_id
                                            AND p_seat = ANY (f.units))
                            THEN 'already_refunded' ELSE 'unknown_item' END;
            RETURN;
        END IF;
        u := ARRAY[p_seat];
        amt := CASE WHEN left_n = 1 THEN bk.amount - done
                    ELSE LEAST(bk.amount - done,
                               (SELECT s.price FROM seats s WHERE s.event_id = bk.event_id
                                   AND s.seat_id = p_seat)) END;
    END IF;
    IF u IS NULL OR cardinality(u) = 0 THEN
        outcome := 'already_refunded';
        RETURN;
    END IF;
    sold_out := NOT EXISTS (SELECT 1 FROM free_units f WHERE f.event_id = bk.event_id);
    DELETE FROM booking_items i WHERE i.booking_id = bk.booking_id AND i.seat_id = ANY (u);
    IF sold_out THEN -- the units came back to a sold-out event (009_outbox.sql)
        PERFORM onsale_event_announce(bk.event_id, 'units_back',
                                      (SELECT e.version FROM events e
                                        WHERE e.event_id = bk.event_id));
    END IF;
    refund_id := 'rfd_' || replace(gen_random_uuid()::text, '-', '');
    PERFORM set_config('onsale.reason', format('%s by %s',
                       CASE WHEN p_seat IS NULL THEN 'booking cancelled'
                            ELSE 'item ' || p_seat || ' refunded' END, p_operator), true);
    INSERT INTO refunds (refund_id, booking_id, event_id, checkout_id, charge_id, whole, units,
                         amount, full_charge, currency, state, operator, lease_until)
    VALUES (refund_id, bk.booking_id, bk.event_id, bk.checkout_id, COALESCE(co.charge_id, ''),
            p_seat IS NULL, u, amt, done = 0 AND amt = co.amount, bk.currency, 'requested',
            p_operator, now() + make_interval(secs => p_lease_seconds));
    -- Announced with the cancellation (009_outbox.sql), under the booking's row lock.
    PERFORM onsale_outbox_emit(bk.event_id, 'booking.cancelled', bk.checkout_id,
        jsonb_build_object('booking_id', bk.booking_id, 'checkout_id', bk.checkout_id,
            'event', bk.event_id, 'buyer', bk.buyer, 'whole', p_seat IS NULL, 'units', u,
            'amount', amt, 'currency', bk.currency, 'office_refund_id', refund_id,
            'operator', p_operator));
    outcome := 'created';
END $$;

-- What the box-office driver needs of a refund: its row, the buyer and hold of its
-- booking, and which of its units Postgres still has free (what Redis may give back:
-- a unit sold again meanwhile keeps its new sale's mark).
CREATE OR REPLACE FUNCTION onsale_office_row(p_refund_id text)
RETURNS TABLE (refund_id text, state text, event_id text, checkout_id text, booking_id text,
               charge_id text, amount bigint, full_charge boolean, buyer text, hold_id text,
               pool_id text, free_units text, n_units integer, attempts integer)
LANGUAGE sql STABLE AS $$
    SELECT f.refund_id, f.state, f.event_id, f.checkout_id, f.booking_id, f.charge_id, f.amount,
           f.full_charge, b.buyer, b.hold_id, b.pool_id,
           array_to_string(onsale_units_free(f.event_id, f.units), ','), cardinality(f.units),
           f.attempts
      FROM refunds f JOIN bookings b ON b.booking_id = f.booking_id
     WHERE f.refund_id = p_refund_id
$$;

-- The driver's claim: up to p_limit refunds not yet refunded whose lease lapsed, leased
-- to the caller for p_lease_seconds (SKIP LOCKED plus the lease: one driver at a time).
CREATE OR REPLACE FUNCTION onsale_office_claim(p_lease_seconds integer, p_limit integer)
RETURNS TABLE (refund_id text)
LANGUAGE sql AS $$
    UPDATE refunds f
       SET lease_until = now() + make_interval(secs => p_lease_seconds),
           attempts = f.attempts + 1
     WHERE f.refund_id IN (
            SELECT k.refund_id FROM refunds k
             WHERE k.state <> 'refunded' AND (k.lease_until IS NULL OR k.lease_until < now())
             ORDER BY k.updated_at
             LIMIT p_limit
               FOR UPDATE SKIP LOCKED)
       AND f.state <> 'refunded' AND (f.lease_until IS NULL OR f.lease_until < now())
    RETURNING f.refund_id
$$;

-- One refund transition from p_from to p_to (the provider's refund id with 'refunded').
-- 'refunded' drops the lease; a refund left short of it is retried after p_retry_seconds.
-- Returns whether this call moved it.
CREATE OR REPLACE FUNCTION onsale_office_step(p_refund_id text, p_from text, p_to text,
        p_provider_id text, p_reason text, p_retry_seconds integer)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    moved refunds%ROWTYPE;
BEGIN
    PERFORM set_config('onsale.reason', p_reason, true);
    IF p_to IS NULL THEN
        UPDATE refunds f SET lease_until = now() + make_interval(secs => p_retry_seconds)
         WHERE f.refund_id = p_refund_id AND f.state = p_from;
        RETURN FOUND;
    END IF;
    UPDATE refunds f SET state = p_to,
           provider_refund_id = COALESCE(p_provider_id, f.provider_refund_id),
           lease_until = CASE WHEN p_to = 'refunded' THEN NULL ELSE f.lease_until END,
           updated_at = now()
     WHERE f.refund_id = p_refund_id AND f.state = p_from
    RETURNING f.* INTO moved;
    IF FOUND AND p_to = 'refunded' THEN
        -- The money went back: announced in this transaction (009_outbox.sql).
        PERFORM onsale_outbox_emit(moved.event_id, 'checkout.refunded', moved.checkout_id,
            jsonb_build_object('checkout_id', moved.checkout_id, 'event', moved.event_id,
                'buyer', (SELECT b.buyer FROM bookings b WHERE b.booking_id = moved.booking_id),
                'amount', moved.amount, 'currency', moved.currency,
                'charge_id', moved.charge_id, 'refund_id', moved.provider_refund_id,
                'refund_reason', 'box_office', 'booking_id', moved.booking_id,
                'office_refund_id', moved.refund_id, 'units', to_jsonb(moved.units)));
        RETURN true;
    END IF;
    RETURN FOUND;
END $$;

-- A booking as the box office shows it (docs/api.md "Box office"): its checkout's
-- payment id and e-mail, every item (booked, or refunded by which refund) and every
-- refund with its state. NULL for an unknown booking.
CREATE OR REPLACE FUNCTION onsale_office_booking_json(p_booking_id text) RETURNS json
LANGUAGE sql STABLE AS $$
    SELECT json_build_object(
        'booking_id', b.booking_id, 'checkout_id', b.checkout_id, 'event', b.event_id,
        'buyer', b.buyer, 'email', c.email, 'created_at', b.created_at,
        'state', CASE WHEN NOT EXISTS (SELECT 1 FROM booking_items i
                                        WHERE i.booking_id = b.booking_id) THEN 'cancelled'
                      WHEN EXISTS (SELECT 1 FROM refunds f WHERE f.booking_id = b.booking_id)
                      THEN 'partly_refunded' ELSE 'confirmed' END,
        'checkout_state', c.state, 'pool', b.pool_id, 'quantity', b.quantity,
        'amount', b.amount, 'currency', b.currency, 'payment_id', c.charge_id,
        'refunded_amount', (SELECT COALESCE(sum(f.amount), 0) FROM refunds f
                             WHERE f.booking_id = b.booking_id),
        'items', COALESCE((SELECT json_agg(json_build_object('unit', x.unit, 'section',
                     s.section, 'pool', s.pool_id, 'price', s.price, 'state', x.st,
                     'refund_id', x.refund_id) ORDER BY s.ord, s.unit_no, x.unit)
                  FROM (SELECT i.seat_id AS unit, 'booked' AS st, NULL::text AS refund_id
                          FROM booking_items i WHERE i.booking_id = b.booking_id
                        UNION ALL
                        SELECT u, 'refunded', f.refund_id FROM refunds f, unnest(f.units) u
                         WHERE f.booking_id = b.booking_id) x
                  JOIN seats s ON s.event_id = b.event_id AND s.seat_id = x.unit), '[]'),
        'refunds', COALESCE((SELECT json_agg(json_build_object('refund_id', f.refund_id,
                     'whole', f.whole, 'units', f.units, 'amount', f.amount,
                     'state', f.state, 'provider_refund_id', f.provider_refund_id,
                     'operator', f.operator, 'created_at', f.created_at,
                     'updated_at', f.updated_at) ORDER BY f.created_at, f.refund_id)
                  FROM refunds f WHERE f.booking_id = b.booking_id), '[]'))
      FROM bookings b JOIN checkouts c ON c.checkout_id = b.checkout_id
     WHERE b.booking_id = p_booking_id
$$;

-- --- events out (009_outbox.sql, reserve/rsv_outbox.c) -------------------------------

-- Writes one event to the outbox, in the caller's transaction: it is delivered if and
-- only if that transaction commits. p_event: the onsale event the change belongs to;
-- p_kind: "<object>.<verb>" (booking.confirmed, booking.cancelled, checkout.refunded,
-- room.sold_out, room.phase_changed); p_key: the ordering key — the checkout id for
-- booking.* and checkout.*, 'room:' || event for room.* (events of one key are delivered
-- in the order written, each only after every earlier one was delivered); the caller
-- must hold the row lock that orders the key's writers (the checkout row, the event
-- row) so that order of writing is order of commit. p_payload: the event's "data"
-- object. Answers the event's id. plpgsql, not sql: its INSERT is planned once per
-- session and kept, where a SQL function called from plpgsql plans its body on every
-- call (one per confirmation: docs/confirm.md, "Measured").
CREATE OR REPLACE FUNCTION onsale_outbox_emit(p_event text, p_kind text, p_key text,
        p_payload jsonb) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    out_id text;
BEGIN
    INSERT INTO outbox (kind, event_id, key, payload)
    VALUES (p_kind, p_event, p_key, p_payload)
    RETURNING id INTO out_id;
    RETURN out_id;
END $$;

-- True when p_event still has a unit no booking holds (free_units, 009_outbox.sql).
-- Near the end (fewer than 64 free units seen, counting the units of bookings not yet
-- committed as free) the answer is taken under a per-event advisory lock held to commit,
-- and read again: two bookings racing for the last units are then serialised, and the
-- second sees the first's, so exactly one of them finds none left. Assumes fewer than 64
-- units of one event in uncommitted bookings at any moment (the connection pool bounds
-- the bookings in flight).
CREATE OR REPLACE FUNCTION onsale_outbox_units_left(p_event text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    -- In key order, so the plan is an index scan that stops at the 64th entry.
    IF (SELECT count(*) FROM (SELECT 1 FROM free_units f WHERE f.event_id = p_event
                               ORDER BY f.event_id, f.seat_id LIMIT 64) l) >= 64 THEN
        RETURN true;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('onsale.units_left'), hashtext(p_event));
    RETURN EXISTS (SELECT 1 FROM free_units f WHERE f.event_id = p_event);
END $$;

-- The deliverer's claim: up to p_limit due, undelivered events that are the earliest
-- undelivered of their key, leased to the caller for p_lease_seconds (attempts counted
-- here, so a reserve killed mid-POST still counts the try). Rows another deliverer is
-- claiming are skipped (SKIP LOCKED), rows under a live lease are not due. Answers each
-- with the body to send, built once here so every attempt sends the same bytes.
CREATE OR REPLACE FUNCTION onsale_outbox_claim(p_limit integer, p_lease_seconds integer)
RETURNS TABLE (seq bigint, id text, attempts integer, body text)
LANGUAGE sql AS $$
    WITH due AS (
        SELECT o.seq FROM outbox o
         WHERE o.delivered_at IS NULL AND o.next_attempt_at <= now()
           AND (o.lease_until IS NULL OR o.lease_until <= now())
           AND NOT EXISTS (SELECT 1 FROM outbox p
                            WHERE p.key = o.key AND p.delivered_at IS NULL AND p.seq < o.seq)
         ORDER BY o.next_attempt_at, o.seq
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED)
    UPDATE outbox o SET lease_until = now() + make_interval(secs => p_lease_seconds),
           attempts = o.attempts + 1
      FROM due WHERE o.seq = due.seq
    RETURNING o.seq, o.id, o.attempts,
              json_build_object('id', o.id, 'type', o.kind,
                                'created', floor(extract(epoch FROM o.created_at))::bigint,
                                'data', o.payload)::text;
$$;

-- The outcome of one delivery: p_error NULL marks it delivered; otherwise it is due
-- again in p_retry_ms and p_error (the status or transport error) is kept for operators.
CREATE OR REPLACE FUNCTION onsale_outbox_done(p_seq bigint, p_error text, p_retry_ms integer)
RETURNS void LANGUAGE sql AS $$
    UPDATE outbox o
       SET delivered_at = CASE WHEN p_error IS NULL THEN now() END,
           lease_until = NULL, last_error = p_error,
           next_attempt_at = CASE WHEN p_error IS NULL THEN o.next_attempt_at
                                  ELSE now() + make_interval(secs => p_retry_ms / 1000.0) END
     WHERE o.seq = p_seq AND o.delivered_at IS NULL;
$$;

-- For the metrics and the prune, one row: undelivered events, the age of the oldest
-- undelivered one (0 when none), and the number of delivered events older than
-- p_keep_seconds deleted now (at most p_prune_limit).
CREATE OR REPLACE FUNCTION onsale_outbox_stats(p_keep_seconds integer, p_prune_limit integer,
        OUT pending bigint, OUT oldest_seconds double precision, OUT pruned bigint)
LANGUAGE plpgsql AS $$
BEGIN
    WITH old AS (SELECT o.seq FROM outbox o
                  WHERE o.delivered_at IS NOT NULL
                    AND o.delivered_at < now() - make_interval(secs => p_keep_seconds)
                  LIMIT p_prune_limit)
    DELETE FROM outbox o USING old WHERE o.seq = old.seq;
    GET DIAGNOSTICS pruned = ROW_COUNT;
    SELECT count(*), COALESCE(extract(epoch FROM now() - min(o.created_at)), 0)
      INTO pending, oldest_seconds
      FROM outbox o WHERE o.delivered_at IS NULL;
END $$;

-- room.phase_changed, from onsale_event_put under the event's row lock: the event was
-- created, its inventory replaced, or its settings updated through the reserve's admin
-- API; and from onsale_office_cancel ('units_back') when a cancellation gives units back
-- to a sold-out event (the reserve's side of a room's life; the waiting room's own phases — prequeue,
-- open, paused — are the gateway's, which has no Postgres). phase: 'on_sale' with units
-- left, 'sold_out' without.
CREATE OR REPLACE FUNCTION onsale_event_announce(p_event text, p_change text, p_version bigint)
RETURNS void LANGUAGE sql AS $$
    SELECT onsale_outbox_emit(p_event, 'room.phase_changed', 'room:' || p_event,
        jsonb_build_object('event', p_event, 'change', p_change, 'version', p_version,
            'phase', CASE WHEN EXISTS (SELECT 1 FROM free_units f WHERE f.event_id = p_event)
                          THEN 'on_sale' ELSE 'sold_out' END));
$$;

-- free_units (009_outbox.sql) follows seats and booking_items: a unit is free from its
-- seat's insert until a booking item takes it, and again when that item is deleted.
CREATE OR REPLACE FUNCTION onsale_free_units_track() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (TG_TABLE_NAME = 'seats') = (TG_OP = 'INSERT') THEN
        INSERT INTO free_units (event_id, seat_id)
        VALUES (COALESCE(NEW.event_id, OLD.event_id), COALESCE(NEW.seat_id, OLD.seat_id))
        ON CONFLICT DO NOTHING;
    ELSE
        DELETE FROM free_units f
         WHERE f.event_id = COALESCE(NEW.event_id, OLD.event_id)
           AND f.seat_id = COALESCE(NEW.seat_id, OLD.seat_id);
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE TRIGGER seats_free_units AFTER INSERT OR DELETE ON seats
    FOR EACH ROW EXECUTE FUNCTION onsale_free_units_track();
CREATE OR REPLACE TRIGGER booking_items_free_units AFTER INSERT OR DELETE ON booking_items
    FOR EACH ROW EXECUTE FUNCTION onsale_free_units_track();

-- A charge the provider confirmed for a checkout that had ended meanwhile (released or
-- failed: given up as unpaid): it holds money, so it moves to refunding with the charge
-- ('late_charge'), under the caller's row lock. The saga's charge-outcome steps (the
-- booking, onsale_saga_book; the hold gone at conversion, onsale_saga_paid_refund) call it
-- when they find the checkout ended.
CREATE OR REPLACE FUNCTION onsale_saga_late_charge(p_checkout_id text, p_charge_id text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('onsale.reason', format('a charge landed after the checkout had ended '
                       '(%s): refund', p_charge_id), true);
    UPDATE checkouts k SET state = 'refunding', charge_id = p_charge_id,
           refund_reason = 'late_charge', updated_at = now()
     WHERE k.checkout_id = p_checkout_id;
END $$;

-- A charge the provider confirmed whose hold could not be booked (expired or gone at
-- conversion, or its items changed: p_refund_reason): the charge and refunding in one
-- commit (013, docs/confirm.md merge (b)). From payment_requested / unknown / converting /
-- requires_action the UPDATE passes through paid (both transitions recorded); from paid it is one step.
-- A checkout that had ended meanwhile (released, failed) is a late charge
-- (onsale_saga_late_charge). applied: this call moved it; state / refund_reason: after
-- the call.
CREATE OR REPLACE FUNCTION onsale_saga_paid_refund(p_checkout_id text, p_charge_id text,
        p_refund_reason text, p_reason text, p_lease_seconds integer,
        OUT applied boolean, OUT state text, OUT refund_reason text)
LANGUAGE plpgsql AS $$
DECLARE
    cur text;
BEGIN
    SELECT k.state INTO cur FROM checkouts k WHERE k.checkout_id = p_checkout_id FOR UPDATE;
    applied := true; state := 'refunding'; refund_reason := p_refund_reason;
    IF cur IN ('released', 'failed') THEN
        PERFORM onsale_saga_late_charge(p_checkout_id, p_charge_id);
        refund_reason := 'late_charge';
        RETURN;
    END IF;
    IF cur IS NULL OR cur NOT IN ('payment_requested', 'unknown', 'converting',
                                  'requires_action', 'paid') THEN
        applied := false; state := cur; refund_reason := NULL;
        RETURN;
    END IF;
    IF cur <> 'paid' THEN
        PERFORM set_config('onsale.via', '{paid,"the provider confirmed the charge"}', true);
    END IF;
    PERFORM set_config('onsale.reason', p_reason, true);
    UPDATE checkouts k SET state = 'refunding', charge_id = p_charge_id,
           refund_reason = p_refund_reason,
           lease_until = now() + make_interval(secs => p_lease_seconds), updated_at = now()
     WHERE k.checkout_id = p_checkout_id;
END $$;
