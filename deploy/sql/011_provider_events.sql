-- onsale reserve: the payment provider's webhook events (docs/api.md "Provider webhooks",
-- reserve/rsv_webhook.c). Each verified event is kept once by its id, so a replay or a
-- retry by the provider does nothing twice; what it did is its outcome:
--   nudged     an open checkout it names was made due for the reconciler at once
--   refunding  a payment that succeeded for a checkout already released or failed: the
--              checkout moved to refunding (as the ledger check moves it)
--   settled    the checkout had settled already: nothing to do
--   not_ours   no checkout of this reserve's database names the payment
CREATE TABLE provider_events (
    event_id text PRIMARY KEY,
    type text NOT NULL,
    object_id text NOT NULL,
    checkout_id text,
    outcome text NOT NULL CHECK (outcome IN ('nudged', 'refunding', 'settled', 'not_ours')),
    provider_created timestamptz,
    received_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX provider_events_checkout ON provider_events (checkout_id);

-- A checkout a webhook made due: the reconciler claims it at its next tick instead of
-- after reconcile_after_s (onsale_reconcile_claim clears it when it claims). No index of
-- its own: the claim reads the open checkouts through checkouts_reconcile (they are few,
-- the ones in flight), and an index here would cost the saga's steps their HOT updates.
ALTER TABLE checkouts ADD COLUMN nudged_at timestamptz;
