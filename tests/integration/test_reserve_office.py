"""The box office (docs/api.md "Box office"): find a booking by each key, cancel it or
refund one item, the CSV exports, and the refund record under crashes and races.

Real Redis, Postgres and payment simulator (the saga stack: saga_env()). A cancelled unit
must be on sale again at once and still sold at most once (docs/design.md invariant 1);
every refund reaches the provider exactly once, also when the reserve is killed between
the steps (fault points office:after_record / after_release / after_refund), and the
reconciliation export agrees with the simulator's ledger.
"""

import csv
import io
import re
import signal
import subprocess
import threading
import urllib.parse
import uuid

import stack
from stack import wait_for
from test_saga_crash import Reserves
from test_saga_flows import SagaCase, saga_stack

SEATS = [{"id": f"A-{i}", "section": "A", "price": 1000 * i} for i in range(1, 21)]


def setUpModule():
    saga_stack("office")


class OfficeCase(SagaCase):
    def office(self, method, path, body=None):
        return self.S.admin(method, path, body)

    def buy(self, ev, buyer, seats=None, pool=None, quantity=None, email=None):
        tok = self.S.token(ev, buyer)
        h = self.hold(ev, tok, seats=seats, pool=pool, quantity=quantity).json
        body = {"payment": {"amount": h["amount"], "currency": "EUR", "source": "tok_visa"}}
        if email is not None:
            body["email"] = email
        r = self.c.post(f"/v1/holds/{h['hold_id']}/confirm", body, token=tok,
                        headers={"Idempotency-Key": uuid.uuid4().hex})
        self.assertStatus(r, 201, msg="confirm:")
        cid = r.json["checkout_id"]
        bid = self.S.sql_value(f"select booking_id from bookings where checkout_id = '{cid}'")
        return cid, bid, h["amount"]

    def refunds_of(self, ev):
        return self.pay.ledger(ev)["refunds"]

    def can_buy(self, ev, seat, buyer=None):
        buyer = buyer or f"again-{uuid.uuid4().hex[:8]}"
        tok = self.S.token(ev, buyer)
        r = self.hold(ev, tok, seats=[seat], expect=None)
        return r.status == 201


class Find(OfficeCase):
    def test_find_by_each_key(self):
        ev = self.new_event("office-find", seats=SEATS, max_per_buyer=10)
        cid, bid, amount = self.buy(ev, "finder-1", seats=["A-1", "A-2"],
                                    email="Finder.One@Example.org")
        keys = {"booking_id": bid, "checkout_id": cid, "buyer": "finder-1",
                "email": "finder.one@example.ORG"}
        for k, v in keys.items():
            r = self.office("GET", f"/admin/bookings?{k}={urllib.parse.quote(v)}")
            self.assertStatus(r, 200, msg=k)
            found = [b for b in r.json["bookings"] if b["booking_id"] == bid]
            self.assertEqual(len(found), 1, f"{k}: {r.json}")
            b = found[0]
            self.assertEqual(b["checkout_id"], cid)
            self.assertEqual(b["amount"], amount)
            self.assertEqual(b["currency"], "EUR")
            self.assertEqual(b["email"], "Finder.One@Example.org")
            self.assertTrue(b["payment_id"].startswith("ch_"), b)
            self.assertEqual(sorted(i["unit"] for i in b["items"]), ["A-1", "A-2"])
            self.assertEqual(b["refunds"], [])
            self.assertEqual(b["state"], "confirmed")
        for ref in (bid, cid):
            r = self.office("GET", f"/admin/bookings/{ref}")
            self.assertStatus(r, 200)
            self.assertEqual(r.json["booking_id"], bid)
        r = self.office("GET", "/admin/bookings?buyer=nobody-at-all")
        self.assertStatus(r, 200)
        self.assertEqual(r.json["bookings"], [])
        self.assertStatus(self.office("GET", "/admin/bookings/bk_nope"), 404, "unknown_booking")

    def test_storefront_asks_for_the_email(self):
        page = self.c.get(f"/shop/?event=x").body.decode()
        self.assertIn('id="pay-email"', page)
        self.assertIn('type="email"', page)
        js = self.c.get("/shop/shop.js").body.decode()
        self.assertIn("body.email = payEmail", js)

    def test_confirm_rejects_a_bad_email(self):
        ev = self.new_event("office-email", seats=SEATS)
        tok = self.S.token(ev, "bad-mail")
        h = self.hold(ev, tok, seats=["A-1"]).json
        for bad in ["no-at-sign", "a@b", "two@@example.org", "sp ace@example.org",
                    "x" * 250 + "@example.org", 42, "a,b@example.org", "=x@-bad-.org"]:
            body = {"payment": {"amount": h["amount"], "currency": "EUR"}, "email": bad}
            r = self.c.post(f"/v1/holds/{h['hold_id']}/confirm", body, token=tok,
                            headers={"Idempotency-Key": uuid.uuid4().hex})
            self.assertStatus(r, 400, "invalid_request", msg=repr(bad))
        self.assertEqual(self.S.sql_value(
            f"select count(*) from checkouts where event_id = '{ev}'"), "0")


class Cancel(OfficeCase):
    def test_cancel_refunds_and_the_seat_sells_again_once(self):
        ev = self.new_event("office-cancel", seats=SEATS, max_per_buyer=10)
        cid, bid, amount = self.buy(ev, "canceller", seats=["A-3"])
        # Sold in Redis (read there, not by a refused hold: a reserve that refused one
        # remembers the seat sold for avail_max_age_ms, which would race the resale below
        # when several reserves serve the buyers).
        seat_key = f"os:{{{ev}}}:s:A-3"
        self.assertTrue(self.S.redis("GET", seat_key).startswith(b"sold"))
        r = self.office("POST", f"/admin/bookings/{bid}/cancel")
        self.assertStatus(r, 200)
        self.assertEqual(r.json["refund_state"], "refunded")
        self.assertEqual(r.json["booking"]["state"], "cancelled")
        self.assertEqual(r.json["booking"]["refunded_amount"], amount)
        rfs = self.refunds_of(ev)
        self.assertEqual([(x["amount"], x["idempotency_key"]) for x in rfs],
                         [(amount, r.json["refund_id"])])
        self.assertEqual(self.S.sql_value(
            f"select count(*) from booking_items where booking_id = '{bid}'"), "0")
        # The audit trail names each step.
        states = [tuple(x) for x in self.S.sql(
            f"select coalesce(from_state,''), to_state from refund_transitions "
            f"where refund_id = '{r.json['refund_id']}' order by id")]
        self.assertEqual(states, [("", "requested"), ("requested", "released"),
                                  ("released", "refunded")])
        # Back on sale at once, and sold to exactly one of several racing buyers.
        n = 6
        results = [None] * n
        toks = [self.S.token(ev, f"racer-{i}") for i in range(n)]

        def race(i):
            c = self.S.client()
            try:
                h = c.post(f"/v1/events/{ev}/holds", {"seats": ["A-3"]}, token=toks[i])
                if h.status != 201:
                    results[i] = h.status
                    return
                body = {"payment": {"amount": h.json["amount"], "currency": "EUR"}}
                results[i] = c.post(f"/v1/holds/{h.json['hold_id']}/confirm", body,
                                    token=toks[i],
                                    headers={"Idempotency-Key": uuid.uuid4().hex}).status
            finally:
                c.close()
        ts = [threading.Thread(target=race, args=(i,)) for i in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(results.count(201), 1, results)
        self.assertEqual(self.S.sql_value(
            f"select count(*) from booking_items where event_id = '{ev}' and seat_id = 'A-3'"),
            "1")

    def test_cancel_twice_concurrently_refunds_once(self):
        ev = self.new_event("office-twice", seats=SEATS, max_per_buyer=10)
        _, bid, amount = self.buy(ev, "twice", seats=["A-4", "A-5"])
        out = []

        def cancel():
            out.append(self.office("POST", f"/admin/bookings/{bid}/cancel"))
        ts = [threading.Thread(target=cancel) for _ in range(6)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertTrue(all(r.status in (200, 202) for r in out), out)
        self.assertEqual(len({r.json["refund_id"] for r in out}), 1, out)
        wait_for(lambda: len(self.refunds_of(ev)) >= 1, 20, what="the refund")
        again = self.office("POST", f"/admin/bookings/{bid}/cancel")
        self.assertStatus(again, 200)
        self.assertEqual(again.json["refund_id"], out[0].json["refund_id"])
        self.assertEqual([x["amount"] for x in self.refunds_of(ev)], [amount])

    def test_refund_one_item_then_the_rest(self):
        ev = self.new_event("office-item", seats=SEATS, max_per_buyer=10)
        _, bid, amount = self.buy(ev, "partial", seats=["A-2", "A-7"])  # 2000 + 7000
        r = self.office("POST", f"/admin/bookings/{bid}/items/A-7/refund")
        self.assertStatus(r, 200)
        self.assertEqual(r.json["booking"]["state"], "partly_refunded")
        self.assertEqual(r.json["booking"]["refunded_amount"], 7000)
        self.assertEqual([x["amount"] for x in self.refunds_of(ev)], [7000])
        self.assertEqual(self.S.redis("GET", f"os:{{{ev}}}:s:A-7"), None)
        self.assertTrue(self.can_buy(ev, "A-7"), "the refunded seat is not on sale")
        self.assertFalse(self.can_buy(ev, "A-2"), "the kept seat was released")
        again = self.office("POST", f"/admin/bookings/{bid}/items/A-7/refund")
        self.assertStatus(again, 409, "already_refunded")
        self.assertStatus(self.office("POST", f"/admin/bookings/{bid}/items/A-9/refund"), 404,
                          "unknown_item")
        # The booking's cancellation refunds what is left, and the sums add up.
        r = self.office("POST", f"/admin/bookings/{bid}/cancel")
        self.assertStatus(r, 200)
        self.assertEqual(r.json["booking"]["state"], "cancelled")
        self.assertEqual(sorted(x["amount"] for x in self.refunds_of(ev)), [2000, 7000])
        self.assertEqual(sum(x["amount"] for x in self.refunds_of(ev)), amount)
        self.assertStatus(self.office("POST", f"/admin/bookings/{bid}/items/A-2/refund"), 409,
                          "already_refunded")

    def test_one_item_refunded_concurrently_is_refunded_once(self):
        ev = self.new_event("office-item2", seats=SEATS, max_per_buyer=10)
        _, bid, _ = self.buy(ev, "item-race", seats=["A-1", "A-6"])
        out = []

        def refund():
            out.append(self.office("POST", f"/admin/bookings/{bid}/items/A-6/refund"))
        ts = [threading.Thread(target=refund) for _ in range(5)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        codes = sorted(r.status for r in out)
        self.assertEqual(len([c for c in codes if c in (200, 202)]), 1, out)
        self.assertEqual([r.err for r in out if r.status == 409], ["already_refunded"] * 4, out)
        wait_for(lambda: len(self.refunds_of(ev)) >= 1, 20, what="the refund")
        self.assertEqual([x["amount"] for x in self.refunds_of(ev)], [6000])

    def test_pool_unit_refund_returns_it_to_the_pool(self):
        ev = self.new_event("office-pool", pools=[{"id": "floor", "capacity": 2, "price": 500}],
                            max_per_buyer=10)
        _, bid, amount = self.buy(ev, "pooler", pool="floor", quantity=2)
        self.assertEqual(self.S.redis("GET", f"os:{{{ev}}}:p:floor"), b"0")
        b = self.office("GET", f"/admin/bookings/{bid}").json
        unit = b["items"][0]["unit"]
        r = self.office("POST", f"/admin/bookings/{bid}/items/{urllib.parse.quote(unit)}/refund")
        self.assertStatus(r, 200)
        self.assertEqual(r.json["booking"]["refunded_amount"], 500)
        cid, bid2, _ = self.buy(ev, "pool-late", pool="floor", quantity=1)
        self.assertEqual(self.S.sql_value(
            f"select count(*) from booking_items where event_id = '{ev}'"), "2")
        self.hold(ev, self.S.token(ev, "pool-later"), pool="floor", quantity=1, expect=409)

    def test_cancel_what_is_not_a_confirmed_booking(self):
        ev = self.new_event("office-unconf", seats=SEATS)
        tok = self.S.token(ev, "declined")
        h = self.hold(ev, tok, seats=["A-1"]).json
        r = self.confirm_src(h, tok, "tok_chargeDeclined")
        self.assertEqual(r.status, 402, r)
        cid = self.S.sql_value(f"select checkout_id from checkouts where hold_id = "
                               f"'{h['hold_id']}'")
        self.assertStatus(self.office("POST", f"/admin/bookings/{cid}/cancel"), 409,
                          "not_confirmed")
        self.assertStatus(self.office("POST", "/admin/bookings/bk_unknown/cancel"), 404,
                          "unknown_booking")
        self.assertEqual(self.refunds_of(ev), [])


class Crash(OfficeCase):
    def setUp(self):
        super().setUp()
        self.r = Reserves(self.S)
        self.addCleanup(self.r.stop_all)

    def crash_cancel(self, point, ev, bid, path=None):
        p = self.r.start({"ONSALE_RESERVE_FAULT": f"office:{point}",
                          "ONSALE_RESERVE_RECONCILE_INTERVAL_MS": "600000"})
        c = stack.Client(p.admin_port, self.S.ctx, timeout=15)
        try:
            c.request("POST", path or f"/admin/bookings/{bid}/cancel", token=self.S.admin_token)
        except Exception:  # noqa: BLE001 — the process died mid-request
            pass
        finally:
            c.close()
        self.assertEqual(p.wait(timeout=15), -signal.SIGKILL, f"{point} not reached")

    def test_crash_at_each_step_refunds_exactly_once(self):
        ev = self.new_event("office-crash", seats=SEATS, max_per_buyer=20)
        bought = {}
        for i, point in enumerate(["after_record", "after_release", "after_refund"]):
            seat = f"A-{10 + i}"
            _, bid, amount = self.buy(ev, f"crash-{i}", seats=[seat])
            self.crash_cancel(point, ev, bid)
            bought[bid] = (amount, seat)
        # The stack's reserve resumes each once its lease lapses.
        ids = ",".join(f"'{b}'" for b in bought)

        def all_refunded():
            return self.S.sql_value(f"select count(*) from refunds where booking_id in ({ids}) "
                                    f"and state = 'refunded'") == str(len(bought))
        wait_for(all_refunded, 60, interval=0.25, what="crashed refunds resumed")
        rfs = self.refunds_of(ev)
        self.assertEqual(sorted(x["amount"] for x in rfs),
                         sorted(a for a, _ in bought.values()), rfs)
        for amount, seat in bought.values():
            self.assertTrue(self.can_buy(ev, seat), f"{seat} not back on sale")


    def test_crash_after_redis_gives_pool_units_back_once(self):
        ev = self.new_event("office-crash-pool",
                            pools=[{"id": "floor", "capacity": 3, "price": 700}], max_per_buyer=10)
        _, bid, _ = self.buy(ev, "crash-pool", pool="floor", quantity=3)
        # Killed after the Redis step, before it was recorded: the resume runs it again.
        self.crash_cancel("after_redis", ev, bid)
        wait_for(lambda: self.S.sql_value(f"select state from refunds where booking_id = "
                                          f"'{bid}'") == "refunded",
                 60, interval=0.25, what="the crashed refund resumed")
        self.assertEqual(self.S.sql_value(
            f"select count(*) from refund_transitions t join refunds f using (refund_id) "
            f"where f.booking_id = '{bid}' and t.to_state = 'released'"), "1")
        # Exactly the three units are back: three sell, a fourth does not.
        self.buy(ev, "pool-after", pool="floor", quantity=3)
        self.hold(ev, self.S.token(ev, "pool-after-2"), pool="floor", quantity=1, expect=409)
        self.assertEqual([x["amount"] for x in self.refunds_of(ev)], [2100])


class Export(OfficeCase):
    def csv(self, ev, what):
        r = self.office("GET", f"/admin/events/{ev}/{what}.csv")
        self.assertStatus(r, 200)
        self.assertTrue(r.header("Content-Type").startswith("text/csv"), r)
        return list(csv.DictReader(io.StringIO(r.body.decode())))

    def test_bookings_csv_content_and_escaping(self):
        ev = self.new_event("office-csv", seats=SEATS, max_per_buyer=10)
        nasty = '=HYPERLINK("http://x",1),\n"b"'
        _, b1, a1 = self.buy(ev, nasty, seats=["A-1", "A-2"], email="+sum@example.org")
        _, b2, a2 = self.buy(ev, "plain", seats=["A-3"])
        self.office("POST", f"/admin/bookings/{b1}/items/A-2/refund")
        r = self.office("GET", f"/admin/events/{ev}/bookings.csv")
        text = r.body.decode()
        self.assertIn('"\'=HYPERLINK(""http://x"",1),\n""b"""', text)
        self.assertIn('"\'+sum@example.org"', text)
        rows = {x["booking_id"]: x for x in self.csv(ev, "bookings")}
        self.assertEqual(set(rows), {b1, b2})
        self.assertEqual(rows[b1]["buyer"], "'" + nasty)
        self.assertEqual(rows[b1]["items"], "A-1")
        self.assertEqual(rows[b1]["refunded_items"], "A-2")
        self.assertEqual(rows[b1]["state"], "partly_refunded")
        self.assertEqual((rows[b1]["amount"], rows[b1]["refunded_amount"]), (str(a1), "2000"))
        self.assertEqual((rows[b2]["state"], rows[b2]["amount"]), ("confirmed", str(a2)))
        self.assertTrue(rows[b2]["payment_id"].startswith("ch_"))
        empty = self.new_event("office-csv0", seats=SEATS)
        self.assertEqual(self.csv(empty, "bookings"), [])
        self.assertStatus(self.office("GET", "/admin/events/no-such-event/bookings.csv"), 404,
                          "unknown_event")
        self.assertStatus(self.office("GET", "/admin/events/no-such-event/reconciliation.csv"),
                          404, "unknown_event")

    def test_reconciliation_agrees_with_the_provider_ledger(self):
        ev = self.new_event("office-recon", seats=SEATS, max_per_buyer=20)
        books = [self.buy(ev, f"rec-{i}", seats=[f"A-{2 * i + 1}", f"A-{2 * i + 2}"])
                 for i in range(4)]
        self.office("POST", f"/admin/bookings/{books[0][1]}/cancel")
        self.office("POST", f"/admin/bookings/{books[1][1]}/items/A-3/refund")
        # A charge the saga itself refunds (payment slower than the hold): not a booking.
        ev_rows = {x["kind"]: x for x in self.csv(ev, "reconciliation")}
        led = self.pay.ledger(ev)
        ok = [c for c in led["charges"] if c["status"] == "succeeded"]
        self.assertEqual(int(ev_rows["charges"]["count"]), len(ok))
        self.assertEqual(int(ev_rows["charges"]["amount"]), sum(c["amount"] for c in ok))
        self.assertEqual(int(ev_rows["refunds"]["count"]), len(led["refunds"]))
        self.assertEqual(int(ev_rows["refunds"]["amount"]),
                         sum(x["amount"] for x in led["refunds"]))
        self.assertEqual(int(ev_rows["bookings"]["count"]), 4)
        self.assertEqual(int(ev_rows["office_refunds"]["count"]), 2)
        self.assertEqual(int(ev_rows["office_refunds_pending"]["count"]), 0)
        kept = sum(c["amount"] for c in ok) - sum(x["amount"] for x in led["refunds"])
        self.assertEqual(int(ev_rows["kept"]["amount"]), kept)
        self.assertEqual({x["event"] for x in ev_rows.values()}, {ev})


class Page(OfficeCase):
    def test_box_office_page_is_served_by_the_admin_listener_with_a_strict_csp(self):
        c = self.S.admin_client()
        try:
            r = c.get("/office/")
            self.assertStatus(r, 200)
            html = r.body.decode()
            csp = r.header("Content-Security-Policy")
            self.assertIn("script-src 'self'", csp)
            self.assertIn("default-src 'none'", csp)
            self.assertNotIn("unsafe-inline", csp)
            self.assertIn("frame-ancestors 'none'", csp)
            self.assertEqual(r.header("Cache-Control"), "no-store")
            # No inline script: every <script> has a src and no body.
            for m in re.finditer(r"<script([^>]*)>(.*?)</script>", html, re.S):
                self.assertIn("src=", m.group(1))
                self.assertEqual(m.group(2).strip(), "")
            self.assertNotRegex(html, r"\son[a-z]+=", "an inline event handler")
            self.assertIn('id="find-form"', html)
            js = c.get("/office/office.js")
            self.assertStatus(js, 200)
            self.assertTrue(js.header("Content-Type").startswith("text/javascript"))
            self.assertIn("/admin/bookings", js.body.decode())
            self.assertNotIn("innerHTML", js.body.decode())
            self.assertStatus(c.get("/office/office.css"), 200)
            self.assertStatus(c.get("/office/nope.js"), 404)
            self.assertStatus(c.request("POST", "/office/"), 405)
            moved = c.get("/office")
            self.assertEqual((moved.status, moved.header("Location")), (301, "/office/"))
        finally:
            c.close()
        # The buyers' listener does not serve it.
        self.assertEqual(self.c.get("/office/").status, 404)


class BadInput(OfficeCase):
    def test_bad_ids_queries_and_bodies(self):
        ev = self.new_event("office-bad", seats=SEATS)
        _, bid, _ = self.buy(ev, "bad-input", seats=["A-1"])
        cases = [
            ("GET", "/admin/bookings", 400),
            ("GET", "/admin/bookings?buyer=a&email=b@example.org", 400),
            ("GET", "/admin/bookings?buyer=" + "x" * 300, 400),
            ("GET", "/admin/bookings?buyer=%01", 400),
            ("GET", "/admin/bookings/" + "x" * 200, 400),
            ("GET", "/admin/bookings/%20", 400),
            ("POST", f"/admin/bookings/{bid}/items/bad%20unit/refund", 400),
            ("POST", f"/admin/bookings/{bid}/items/" + "u" * 100 + "/refund", 400),
            ("GET", f"/admin/bookings/{bid}/cancel", 405),
            ("POST", f"/admin/bookings/{bid}", 405),
            ("DELETE", f"/admin/bookings/{bid}/cancel", 405),
            ("POST", f"/admin/bookings/{bid}/frobnicate", 404),
            ("GET", "/admin/events/bad%20id/bookings.csv", 400),
            ("POST", f"/admin/events/{ev}/bookings.csv", 405),
        ]
        for method, path, want in cases:
            r = self.office(method, path)
            self.assertEqual(r.status, want, f"{method} {path[:80]}: {r!r}")
        # A huge or malformed body on cancel is refused, and cancels nothing.
        c = self.S.admin_client()
        try:
            r = c.request("POST", f"/admin/bookings/{bid}/cancel", raw=b"x" * 200000,
                          token=self.S.admin_token)
            self.assertIn(r.status, (400, 413), r)
        finally:
            c.close()
        self.assertEqual(self.S.sql_value(f"select count(*) from refunds where booking_id = "
                                          f"'{bid}'"), "0")
        # The admin token is required.
        c = self.S.admin_client()
        try:
            self.assertEqual(c.request("POST", f"/admin/bookings/{bid}/cancel").status, 401)
            self.assertEqual(c.request("GET", f"/admin/events/{ev}/bookings.csv").status, 401)
        finally:
            c.close()
        self.assertEqual(self.S.sql_value(f"select count(*) from refunds where booking_id = "
                                          f"'{bid}'"), "0")
