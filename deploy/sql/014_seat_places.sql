-- onsale reserve: best available (docs/design.md "Best available"). A seat may carry its
-- place, a row (seat_row, the operator's name for it, within the seat's section) and a
-- position along that row (seat_pos): two seats of one section and row whose positions
-- differ by one are adjacent. rank orders the seats best first (lower is better); a seat
-- without one ranks by its place in the operator's list (ord). None of the three decides
-- a sale: they only steer which free seats a best-available hold picks, so they may
-- change while the event has sales (onsale_event_put updates them in place).
ALTER TABLE seats ADD COLUMN seat_row text;
ALTER TABLE seats ADD COLUMN seat_pos integer;
ALTER TABLE seats ADD COLUMN rank integer;
ALTER TABLE seats ADD CONSTRAINT seats_place_check
    CHECK ((seat_row IS NULL) = (seat_pos IS NULL) AND (section IS NOT NULL OR seat_row IS NULL));
