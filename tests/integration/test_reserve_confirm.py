"""Confirmation: one Idempotency-Key = one purchase (invariant 6), and Postgres as the
final authority when Redis loses everything (invariants 1, 2, 7)."""

import uuid

import stack
from stack import summarize
from test_saga_flows import Paysim


def setUpModule():
    stack.module_stack("confirm")


SEATS = [{"id": f"A-{i}", "section": "A", "price": 12000} for i in range(1, 7)]


def payment(amount, source="tok_visa"):
    return {"payment": {"amount": amount, "currency": "EUR", "source": source}}


class ConfirmBasics(stack.ReserveTestCase):
    def test_confirm_books_the_seat(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        t, t2 = self.S.token(ev, "payer"), self.S.token(ev, "later")
        h = self.hold(ev, t, seats=["A-1", "A-2"])
        r = self.confirm(h.json["hold_id"], t, h.json["amount"])
        self.assertStatus(r, 201)
        for f in ("checkout_id", "booking_id"):
            self.assertTrue(r.json.get(f), repr(r))
        self.assertEqual((r.json.get("state"), r.json.get("event"), r.json.get("hold_id")),
                         ("confirmed", ev, h.json["hold_id"]), repr(r))
        self.assertEqual(sorted(r.json.get("seats", [])), ["A-1", "A-2"], repr(r))
        rows = self.S.sql(f"select seat_id, booking_id from booking_items "
                          f"where event_id = '{ev}' order by seat_id")
        self.assertEqual(rows, [["A-1", r.json["booking_id"]], ["A-2", r.json["booking_id"]]])
        # Sold means never held again.
        self.assertStatus(self.c.post(f"/v1/events/{ev}/holds", {"seats": ["A-2"]}, token=t2),
                          409, "seat_unavailable")

    def test_confirm_ga_books_numbered_units(self):
        ev = self.new_event(pools=[{"id": "floor", "capacity": 10, "price": 6000}],
                            max_per_buyer=4)
        t = self.S.token(ev, "ga-payer")
        h = self.hold(ev, t, pool="floor", quantity=3)
        self.assertEqual(h.json.get("amount"), 18000, repr(h))
        r = self.confirm(h.json["hold_id"], t, 18000)
        self.assertStatus(r, 201)
        self.assertEqual((r.json.get("pool"), r.json.get("quantity")), ("floor", 3), repr(r))
        units = [row[0] for row in self.S.sql(
            f"select seat_id from booking_items where event_id = '{ev}'")]
        self.assertEqual(len(units), 3, units)
        self.assertTrue(all(u.startswith("floor#") for u in units), units)

    def test_confirm_input_errors(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        t = self.S.token(ev, "careless")
        h = self.hold(ev, t, seats=["A-3"])
        hid, amount = h.json["hold_id"], h.json["amount"]
        path = f"/v1/holds/{hid}/confirm"
        self.assertStatus(self.c.post(path, payment(amount), token=t), 400, "invalid_request",
                          msg="no Idempotency-Key:")
        for bad in ("", "é", "a b", "x" * 256):
            r = self.c.post(path, payment(amount), token=t,
                            headers={"Idempotency-Key": bad.encode("utf-8").decode("latin-1")})
            self.assertStatus(r, 400, "invalid_request", msg=f"Idempotency-Key {bad[:10]!r}:")
        r = self.c.post(path, payment(amount + 1), token=t,
                        headers={"Idempotency-Key": uuid.uuid4().hex})
        self.assertStatus(r, 400, msg="amount ≠ hold amount:")
        r = self.c.post(path, {"payment": {"amount": str(amount), "currency": "EUR",
                                           "source": "tok_visa"}}, token=t,
                        headers={"Idempotency-Key": uuid.uuid4().hex})
        self.assertStatus(r, 400, "invalid_request", msg="amount as string:")
        self.assertEqual(self.S.sql_value(
            f"select count(*) from bookings where event_id = '{ev}'"), "0")
        # The hold survived the bad attempts.
        self.assertStatus(self.confirm(hid, t, amount), 201)


class ConfirmReplay(stack.ReserveTestCase):
    def test_same_key_5x_concurrently_one_booking_then_replay_then_reuse(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        t = self.S.token(ev, "double-clicker")
        h = self.hold(ev, t, seats=["A-4"])
        hid, amount = h.json["hold_id"], h.json["amount"]
        key = uuid.uuid4().hex
        req = self.S.req("POST", f"/v1/holds/{hid}/confirm", token=t, body=payment(amount),
                         headers={"Idempotency-Key": key})
        res = self.S.burst([req] * 5)
        summary = summarize(res)
        ok = [r for r in res if r.status in (200, 201)]
        self.assertEqual([r for r in res if r not in ok and
                          not (r.status == 409 and r.err == "in_progress")], [],
                         f"only 201/200 or 409 in_progress expected: {summary}")
        self.assertEqual(sum(r.status == 201 for r in res), 1, f"exactly one 201: {summary}")
        first = next(r for r in res if r.status == 201)
        for r in ok:
            self.assertEqual(r.json, first.json, f"answers differ: {first!r} vs {r!r}")
        booking, checkout = first.json["booking_id"], first.json["checkout_id"]

        self.assertEqual(self.S.sql(
            f"select booking_id from bookings where event_id = '{ev}'"), [[booking]])
        self.assertEqual(self.S.sql_value(
            f"select count(*) from bookings where checkout_id = '{checkout}'"), "1")
        self.assertEqual(self.S.sql(
            f"select seat_id, booking_id from booking_items where event_id = '{ev}'"),
            [["A-4", booking]])
        self.assertEqual(self.S.sql_value(
            f"select count(*) from checkouts where event_id = '{ev}'"), "1")

        again = self.c.post(f"/v1/holds/{hid}/confirm", payment(amount), token=t,
                            headers={"Idempotency-Key": key})
        self.assertStatus(again, 200, msg="replay after completion:")
        self.assertEqual(again.json, first.json)

        other = self.c.post(f"/v1/holds/{hid}/confirm", payment(amount, "tok_mastercard"),
                            token=t, headers={"Idempotency-Key": key})
        self.assertStatus(other, 422, "idempotency_key_reused", msg="same key, other body:")
        self.assertEqual(self.S.sql_value(
            f"select count(*) from bookings where event_id = '{ev}'"), "1")


class RedisLoss(stack.ReserveTestCase):
    """Losing all of Redis must never lose or duplicate a sale."""

    def assert_no_half_written(self, ev):
        orphans = self.S.sql_value(
            f"select count(*) from bookings b where b.event_id = '{ev}' and not exists "
            f"(select 1 from booking_items i where i.booking_id = b.booking_id)")
        self.assertEqual(orphans, "0", "booking without items")
        orphans = self.S.sql_value(
            f"select count(*) from booking_items i where i.event_id = '{ev}' and not exists "
            f"(select 1 from bookings b where b.booking_id = i.booking_id)")
        self.assertEqual(orphans, "0", "items without booking")

    def test_a_hold_lost_with_redis_then_both_confirm_one_booking(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        t1, t2 = self.S.token(ev, "first"), self.S.token(ev, "second")
        h1 = self.hold(ev, t1, seats=["A-5"])
        self.assertEqual(self.S.redis("FLUSHALL"), "OK")
        h2 = self.c.post(f"/v1/events/{ev}/holds", {"seats": ["A-5"]}, token=t2)
        self.assertStatus(h2, 201, msg="hold after FLUSHALL (the first hold is gone):")

        reqs = [self.S.req("POST", f"/v1/holds/{h['hold_id']}/confirm", token=t,
                           body=payment(h["amount"]),
                           headers={"Idempotency-Key": uuid.uuid4().hex})
                for h, t in ((h1.json, t1), (h2.json, t2))]
        res = self.S.burst(reqs)
        summary = summarize(res)
        won = [r for r in res if r.status == 201]
        self.assertEqual(len(won), 1, f"exactly one confirm succeeds: {summary}")
        loser = next(r for r in res if r is not won[0])
        self.assertEqual(loser.status, 409, f"the other gets a 409: {summary} {loser!r}")
        self.assertIn(loser.err, ("hold_expired", "seat_unavailable"), repr(loser))

        self.assertEqual(self.S.sql(
            f"select seat_id, booking_id from booking_items where event_id = '{ev}'"),
            [["A-5", won[0].json["booking_id"]]])
        self.assertEqual(self.S.sql_value(
            f"select count(*) from bookings where event_id = '{ev}'"), "1")
        self.assert_no_half_written(ev)
        states = self.S.sql(f"select checkout_id, state from checkouts where event_id = '{ev}'")
        confirmed = [c for c, s in states if s == "confirmed"]
        self.assertEqual(confirmed, [won[0].json["checkout_id"]], f"checkouts: {states}")

    def test_sold_seat_stays_sold_after_flushall(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        t1, t2 = self.S.token(ev, "buyer"), self.S.token(ev, "after-restore")
        h = self.hold(ev, t1, seats=["A-6"])
        self.assertStatus(self.confirm(h.json["hold_id"], t1, h.json["amount"]), 201)
        self.assertEqual(self.S.redis("FLUSHALL"), "OK")
        r = self.c.post(f"/v1/events/{ev}/holds", {"seats": ["A-6"]}, token=t2)
        self.assertStatus(r, 409, "seat_unavailable", msg="sold seat right after FLUSHALL:")
        self.assertEqual(r.json.get("unavailable"), ["A-6"], repr(r))
        # Unsold seats are still sellable.
        self.hold(ev, t2, seats=["A-1"])
        self.assertEqual(self.S.sql_value(
            f"select count(*) from booking_items where event_id = '{ev}'"), "1")
        self.assert_no_half_written(ev)

    def test_stale_redis_restore_postgres_constraint_refuses_second_booking(self):
        """Redis restored from a snapshot older than a sale: the event looks loaded (its
        seed marker is back) but the sold mark is not, so Redis lets a second buyer hold
        the sold seat. Postgres' UNIQUE (event_id, seat_id) must refuse the booking and
        the second buyer's payment must go back."""
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        t1, t2 = self.S.token(ev, "sold-to"), self.S.token(ev, "stale-view")
        h1 = self.hold(ev, t1, seats=["A-4"])
        c1 = self.confirm(h1.json["hold_id"], t1, h1.json["amount"])
        self.assertStatus(c1, 201)
        before = stack.metric_sum(self.S.metrics(),
                                  "onsale_reserve_uniqueness_conflicts_total")
        self.assertEqual(self.S.redis("FLUSHALL"), "OK")
        self.assertEqual(self.S.redis("SET", "os:{%s}:seed" % ev, "1"), "OK")
        h2 = self.c.post(f"/v1/events/{ev}/holds", {"seats": ["A-4"]}, token=t2)
        self.assertStatus(h2, 201, msg="the stale Redis lets the sold seat be held:")
        c2 = self.confirm(h2.json["hold_id"], t2, h2.json["amount"])
        self.assertEqual(c2.status, 409, repr(c2))
        self.assertIn(c2.err, ("hold_expired", "seat_unavailable"), repr(c2))
        self.assertEqual(self.S.sql(
            f"select seat_id, booking_id from booking_items where event_id = '{ev}'"),
            [["A-4", c1.json["booking_id"]]])
        self.assertEqual(self.S.sql_value(
            f"select count(*) from bookings where event_id = '{ev}'"), "1")
        self.assert_no_half_written(ev)
        # The payment went back: by the provider's ledger, the refused checkout keeps no
        # charge — refunded in full, once — or was never charged at all.
        cid, state, refund_id = self.S.sql(
            f"select checkout_id, state, coalesce(refund_id, '') from checkouts "
            f"where event_id = '{ev}' and buyer = 'stale-view'")[0]
        self.assertIn(state, ("refunded", "failed"), "the refused checkout ended terminal")
        led = Paysim(self.S).ledger(ev)
        paid = [ch for ch in led["charges"]
                if ch["checkout"] == cid and ch["status"] == "succeeded"]
        refunds = {ch["id"]: [rf for rf in led["refunds"] if rf["payment_intent"] == ch["id"]]
                   for ch in paid}
        self.assertLessEqual(len(paid), 1, led)
        for ch in paid:
            self.assertEqual([(rf["amount"], rf["status"]) for rf in refunds[ch["id"]]],
                             [(h2.json["amount"], "succeeded")], f"charge {ch['id']} kept: {led}")
            self.assertEqual(ch["amount"], h2.json["amount"])
            self.assertEqual(state, "refunded")
            self.assertEqual(refund_id, refunds[ch["id"]][0]["id"])
            self.assertEqual(c2.json.get("refund", {}).get("id"), refund_id, repr(c2))
        if state == "refunded":
            self.assertEqual(len(paid), 1, f"refunded without a charge: {led}")
        after = stack.metric_sum(self.S.metrics(), "onsale_reserve_uniqueness_conflicts_total")
        self.assertEqual(after - before, 1, "one booking refused by the unique constraint")

    def test_stale_restore_refused_booking_gives_the_buyer_limit_back(self):
        """Regression: Redis converted the hold, Postgres refused the
        booking (stale restore); the buyer-limit entry stayed consumed forever, so the
        refunded buyer could never buy again."""
        ev = self.new_event(seats=SEATS, max_per_buyer=1)
        t1, t2 = self.S.token(ev, "owner"), self.S.token(ev, "refunded-one")
        h1 = self.hold(ev, t1, seats=["A-2"])
        self.assertStatus(self.confirm(h1.json["hold_id"], t1, h1.json["amount"]), 201)
        self.assertEqual(self.S.redis("FLUSHALL"), "OK")
        self.assertEqual(self.S.redis("SET", "os:{%s}:seed" % ev, "1"), "OK")
        h2 = self.hold(ev, t2, seats=["A-2"])
        c2 = self.confirm(h2.json["hold_id"], t2, h2.json["amount"])
        self.assertEqual(c2.status, 409, repr(c2))
        self.assertEqual(self.S.sql_value(
            f"select state from checkouts where event_id = '{ev}' and buyer = 'refunded-one'"),
            "refunded")
        # Paid back, owns nothing: the limit of 1 lets them hold another seat.
        self.hold(ev, t2, seats=["A-3"])
        # The seat sold in Postgres stays unavailable.
        r = self.c.post(f"/v1/events/{ev}/holds", {"seats": ["A-2"]},
                        token=self.S.token(ev, "third"))
        self.assertStatus(r, 409, "seat_unavailable")

    def test_per_buyer_limit_counts_purchases_after_flushall(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=2)
        t = self.S.token(ev, "collector")
        h = self.hold(ev, t, seats=["A-1", "A-2"])
        self.assertStatus(self.confirm(h.json["hold_id"], t, h.json["amount"]), 201)
        self.assertEqual(self.S.redis("FLUSHALL"), "OK")
        r = self.c.post(f"/v1/events/{ev}/holds", {"seats": ["A-3"]}, token=t)
        self.assertStatus(r, 429, "limit_exceeded", msg="a third seat after FLUSHALL:")
        self.hold(ev, self.S.token(ev, "someone-else"), seats=["A-3"])

    def test_pool_counter_reseeded_after_flushall(self):
        ev = self.new_event(pools=[{"id": "floor", "capacity": 3, "price": 6000}],
                            max_per_buyer=4)
        t1, t2, t3 = (self.S.token(ev, s) for s in ("p1", "p2", "p3"))
        h = self.hold(ev, t1, pool="floor", quantity=2)
        self.assertStatus(self.confirm(h.json["hold_id"], t1, h.json["amount"]), 201)
        self.assertEqual(self.S.redis("FLUSHALL"), "OK")
        r = self.c.post(f"/v1/events/{ev}/holds", {"pool": "floor", "quantity": 2}, token=t2)
        self.assertStatus(r, 409, "insufficient", msg="2 of the 1 unit left after FLUSHALL:")
        self.assertEqual(r.json.get("available"), 1, repr(r))
        self.hold(ev, t2, pool="floor", quantity=1)
        r = self.c.post(f"/v1/events/{ev}/holds", {"pool": "floor", "quantity": 1}, token=t3)
        self.assertStatus(r, 409, "sold_out")
        self.assertEqual(self.S.sql_value(
            f"select count(*) from booking_items where event_id = '{ev}'"), "2")
