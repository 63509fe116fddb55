-- pgbench -f script: one confirmation as the reserve's saga sends it to Postgres, the same
-- statements, in the same order, each its own transaction (autocommit, as rsv_pg sends
-- them) — the happy path of a foreground checkout (reserve/rsv_checkout.c, rsv_saga.c;
-- docs/confirm.md counts them):
--   1 onsale_saga_start  insert the checkout in payment_requested, its transitions
--                        created→hold_extended→payment_requested (after the
--                        hold's extend, before the charge; 005, one row since 006)  commit
--   2 onsale_saga_book   after the provider's 201 and convert.lua: the charge id,
--                        booking + item, payment_requested→paid→converted→confirmed,
--                        the 201 answer stored (one transaction since 004, one UPDATE
--                        since 006, the charge in it since 013)                     commit
-- pgbench sends them unprepared (simple protocol); the reserve runs them prepared
-- (reserve/rsv_pg.c), so the replay costs Postgres a little more than the reserve's.
-- on the real tables, functions and triggers (deploy/sql), on the event bench-replay
-- whose seats 'r<run>-<client>-<n>' bench_reserve.sh creates first (-t per client at
-- most as many as it created). Ids: :run (-D), pgbench's :client_id, a per-client
-- counter :n (-D n=0, kept across transactions).
\set n :n + 1
SELECT outcome, checkout_id, state, response_code, response_body, charge_id, refund_id, refund_reason FROM onsale_saga_start('co-r:run-:client_id-:n', 'bench-replay', 'rb-:run-:client_id-:n', 'k-:run-:client_id-:n', 'c0ffee0123456789abcdef0123456789abcdef0123456789abcdef0123456789', '0123456789abcdef0123456789abcdef.bench-replay', 100, 'EUR', 30, 'tok_visa', 'payment_requested', NULL, NULL::int, NULL);
SELECT outcome, booking_id, refund_reason, detail, failures FROM onsale_saga_book('co-r:run-:client_id-:n', 'bk-r:run-:client_id-:n', NULL, '{"r:run-:client_id-:n"}'::text[], '{"checkout_id":"co-r:run-:client_id-:n","booking_id":"bk-r:run-:client_id-:n","state":"confirmed","event":"bench-replay","hold_id":"0123456789abcdef0123456789abcdef.bench-replay","seats":["r:run-:client_id-:n"],"amount":100,"currency":"EUR","charge_id":"ch_r:run-:client_id-:n"}', 3::int, 'ch_r:run-:client_id-:n');
