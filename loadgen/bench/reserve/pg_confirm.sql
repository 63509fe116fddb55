-- pgbench -f script, the reference for confirm throughput in bench_reserve.sh: one
-- transaction writing what a confirm writes — a checkout row, a booking row and a
-- booking item under the (event_id, seat_id) primary key — into the bench_* tables
-- (pg_tables.sql). Ids are unique without a round trip: :run (-D, one per repetition),
-- pgbench's :client_id and a per-client counter :n (-D n=0, kept across transactions).
\set n :n + 1
BEGIN;
INSERT INTO bench_checkouts (checkout_id, event_id, buyer, idem_key, request_hash, hold_id, state, amount, currency) VALUES ('co-:run-:client_id-:n', 'bench', 'buyer-:run-:client_id-:n', 'key-:n', 'h', 'hold-:run-:client_id-:n', 'confirmed', 100, 'EUR');
INSERT INTO bench_bookings (booking_id, event_id, buyer, checkout_id, hold_id, quantity, amount, currency) VALUES ('bk-:run-:client_id-:n', 'bench', 'buyer-:run-:client_id-:n', 'co-:run-:client_id-:n', 'hold-:run-:client_id-:n', 1, 100, 'EUR');
INSERT INTO bench_booking_items (event_id, seat_id, booking_id) VALUES ('bench', 'seat-:run-:client_id-:n', 'bk-:run-:client_id-:n');
END;
