-- onsale reserve: a checkout starts in one commit (issue 9, docs/confirm.md).
--
-- The reserve extends the buyer's hold in Redis first, then calls onsale_saga_start: it
-- starts or resumes the checkout like onsale_saga_begin and, for a new one, records in
-- the same transaction where the extend left it (each transition written to
-- checkout_transitions by the trigger of 001, with its reason):
--   p_to = 'payment_requested'  created → hold_extended → payment_requested (the hold
--                               was extended and its amount matches; the lease renewed)
--   p_to = 'failed'             created → failed with p_reason and the answer p_code /
--                               p_body (the hold is gone, expired, converted, or its
--                               amount differs)
--   p_to IS NULL                created, as onsale_saga_begin (the extend's outcome is not
--                               known: the saga extends the hold itself)
-- A resumed, busy, done or mismatched checkout is left as onsale_saga_begin leaves it:
-- the extend's outcome only ever describes a checkout this call inserted.

CREATE FUNCTION onsale_saga_start(p_checkout_id text, p_event text, p_buyer text,
        p_key text, p_hash text, p_hold text, p_amount bigint, p_currency text,
        p_lease_seconds integer, p_source text, p_to text, p_reason text, p_code integer,
        p_body text,
        OUT outcome text, OUT checkout_id text, OUT state text, OUT response_code integer,
        OUT response_body text, OUT charge_id text, OUT refund_id text,
        OUT refund_reason text)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT b.outcome, b.checkout_id, b.state, b.response_code, b.response_body, b.charge_id,
           b.refund_id, b.refund_reason
      INTO outcome, checkout_id, state, response_code, response_body, charge_id, refund_id,
           refund_reason
      FROM onsale_saga_begin(p_checkout_id, p_event, p_buyer, p_key, p_hash, p_hold,
                             p_amount, p_currency, p_lease_seconds, p_source) b;
    IF outcome <> 'new' OR p_to IS NULL THEN
        RETURN;
    END IF;
    IF p_to = 'payment_requested' THEN
        PERFORM set_config('onsale.reason', 'hold extended at checkout start', true);
        UPDATE checkouts k SET state = 'hold_extended' WHERE k.checkout_id = p_checkout_id;
        PERFORM set_config('onsale.reason', 'payment requested', true);
        UPDATE checkouts k SET state = 'payment_requested',
               lease_until = now() + make_interval(secs => p_lease_seconds), updated_at = now()
         WHERE k.checkout_id = p_checkout_id;
    ELSIF p_to = 'failed' THEN
        PERFORM set_config('onsale.reason', p_reason, true);
        UPDATE checkouts k SET state = 'failed', response_code = p_code,
               response_body = p_body, lease_until = NULL, updated_at = now()
         WHERE k.checkout_id = p_checkout_id;
        response_code := p_code; response_body := p_body;
    ELSE
        RAISE EXCEPTION 'onsale_saga_start: no start in state %', p_to;
    END IF;
    state := p_to;
END $$;
