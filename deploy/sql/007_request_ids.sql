-- onsale reserve: the request ids of a checkout (issue 22, docs/operations.md "Logs and
-- request ids"), so a buyer's "I paid, where is my ticket?" is one search from the row to
-- the log lines and the provider's charge:
--   request_id            the X-Request-Id of the confirm that created the checkout (the
--                         reserve's log lines of that request carry it, and the charge's
--                         metadata.request_id at the provider)
--   admission_request_id  the rid claim of the admission token the confirm carried: the
--                         request id of the gateway poll that admitted the buyer (NULL for
--                         a token without one)
-- Both are written once, when the checkout is inserted, and never change (so they cost
-- no HOT update). GET /admin/checkouts?request_id= finds a checkout by either, through
-- these indexes.
--
-- onsale_saga_start takes them (and answers request_id): functions.sql defines the new
-- signature; the old one is dropped here, since CREATE OR REPLACE cannot change a
-- function's arguments (it would add an overload beside it).

ALTER TABLE checkouts ADD COLUMN request_id text, ADD COLUMN admission_request_id text;
CREATE INDEX checkouts_request_id ON checkouts (request_id);
CREATE INDEX checkouts_admission_request_id ON checkouts (admission_request_id);

DROP FUNCTION onsale_saga_start(text, text, text, text, text, text, bigint, text, integer,
                                text, text, text, integer, text);
