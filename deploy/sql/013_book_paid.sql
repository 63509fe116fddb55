-- onsale reserve: the charge recorded in the booking's commit (docs/confirm.md, merge (b)).
-- onsale_saga_book takes the charge the provider confirmed (p_charge_id) and records it,
-- passing through paid, in the booking's transaction; its new definition, and the
-- charge-and-refund step of a hold that could not be booked (onsale_saga_paid_refund),
-- are in functions.sql. The old signature goes (CREATE OR REPLACE cannot add an
-- argument).
DROP FUNCTION IF EXISTS onsale_saga_book(text, text, text, text[], text, integer);
