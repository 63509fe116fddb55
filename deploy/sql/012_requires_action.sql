-- onsale reserve: 3-D Secure (docs/api.md "3-D Secure"). A checkout whose charge the
-- provider answered requires_action waits in the new state requires_action for the buyer
-- to authenticate at the provider's challenge page: payment_requested | unknown →
-- requires_action → paid | declined | released (reserve/rsv_saga_state.h). It is open
-- (not terminal), so the reconciler's claim and a webhook's nudge pick it up as they do
-- every open checkout; its response_body is the 202 answer with next_action.
ALTER TABLE checkouts DROP CONSTRAINT checkouts_state_check;
ALTER TABLE checkouts ADD CONSTRAINT checkouts_state_check CHECK (state IN (
    'created', 'converting', 'hold_extended', 'payment_requested', 'paid', 'declined',
    'unknown', 'converted', 'refunding', 'confirmed', 'failed', 'released', 'refunded',
    'requires_action'));
