"""A queue that knows the stock (docs/design.md, "A queue that knows the stock"): the
reserve publishes what is still buyable of each live event (os:{<event>}:stock, the stock
feed) and the gateways follow it on every tick. When no unit is left — every one sold or
held — the room is sold out by itself: waiting fans are told so at their next poll (and
keep their places while held units may come back), new joins are refused, and nobody is
admitted, on any gateway. When holds end and units come back, the fans still waiting are
let in, in order, and never more than the units left allow.

Runs against a real stack: two gateways and the reserve sharing one Redis; the stock is
the reserve's own, never written by the test."""

import time
import uuid

import gwstack
import stack
from gwstack import ticket_number

SEATS = 3


def setUpModule():
    gwstack.module_stack("gw-stock", gateways=2)


class Stock(gwstack.GatewayTestCase):
    def setUp(self):
        super().setUp()
        self.rc = self.GS.S.client()  # the reserve's buyer API
        self.addCleanup(self.rc.close)

    def event(self, seats=SEATS, fans=10, **room):
        """An event of `seats` seats with a paused fifo room of `fans` joined fans, once the
        gateways know its stock (the availability read makes the event live at the
        reserve, whose feed then publishes it)."""
        ev = gwstack.new_id("stk")
        self.GS.S.create_event(ev, sections=[{"id": "A", "rows": 1, "seats_per_row": seats,
                                              "price": 1000}],
                               hold_ttl_seconds=300, max_per_buyer=1)
        settings = dict(rate_per_minute=6000, paused=True, mode="fifo",
                        noshow_grace_seconds=3600, stock_decide_seconds=30)
        settings.update(room)
        ev_room = self.GS.admin("PUT", f"/admin/events/{ev}", settings)
        self.assertStatus(ev_room, 201)
        stack.wait_for(lambda: self.rc.get(f"/v1/events/{ev}/availability").status == 200, 5,
                       what="the event in the reserve's catalogue")
        tickets = sorted(self.burst_join(ev, fans), key=ticket_number)
        if settings.get("stock_aware", True):
            self.wait_stats(ev, lambda st: st["stock_left"] == seats, "the stock, all left")
        return ev, tickets

    def stats(self, ev, gw=None):
        return self.GS.admin("GET", f"/admin/events/{ev}", gw=gw).json["stats"]

    def wait_stats(self, ev, pred, what, timeout=5):
        """Waits until pred(stats) holds on every gateway."""
        for g in self.GS.gateways:
            stack.wait_for(lambda: pred(self.stats(ev, g)), timeout, interval=0.05,
                           what=f"{what} (gateway {g.name})")

    def poll_until(self, ev, tickets, pred, timeout=5):
        """Polls the fans until pred holds of every fan's last answer; returns poll_fans'
        pair, with every admission seen meanwhile."""
        admitted = {}
        end = time.monotonic() + timeout
        while True:
            got, last = self.poll_fans(ev, tickets, 0.2)
            admitted.update(got)
            if all(pred(j) for j in last.values()) or time.monotonic() > end:
                return admitted, last

    def hold(self, ev, token, seat):
        h = self.rc.post(f"/v1/events/{ev}/holds", {"seats": [seat]}, token=token)
        self.assertStatus(h, 201, msg=f"hold of {seat}:")
        return h.json

    def test_the_stock_caps_admission_ends_the_sale_and_reopens_it_in_order(self):
        ev, tickets = self.event()
        self.patch(ev, paused=False)
        admitted, _ = self.poll_fans(ev, tickets, 1.5)
        self.assertEqual(sorted(admitted), [1, 2, 3],
                         f"{SEATS} seats left: the first {SEATS} fans, nobody more")
        holds = [self.hold(ev, admitted[n], f"A-1-{n}") for n in (1, 2, 3)]

        # Everything held: sold out for now, on both gateways, within the feed's staleness.
        self.wait_stats(ev, lambda st: st["stock_left"] == 0 and st["stock_held"] == SEATS,
                        "the stock, all held")
        # (each of a gateway's workers learns it at its own next tick)
        got, last = self.poll_until(ev, tickets[3:], lambda j: j["state"] == "sold_out")
        self.assertEqual(got, {}, "nobody is admitted while nothing is left")
        for num, j in last.items():
            self.assertEqual((j["state"], j.get("returns_possible")), ("sold_out", True), j)
            self.assertEqual(j["position"], num - 3, j)
            self.assertEqual(j["held"], SEATS, j)
            self.assertGreater(j["poll_after_ms"], 0, j)
        for g in self.GS.gateways:  # no new place while nothing is left
            c = g.client()
            try:
                self.assertStatus(self.join(ev, client=c, expect=None), 410, "sold_out")
            finally:
                c.close()
        self.assertEqual(self.GS.admin("GET", f"/admin/events/{ev}").json["stats"]
                         ["admitted_total"], SEATS)
        # the page says so, and keeps the place
        self.page_says(ev, tickets[4], 'data-state="returns"')

        # One hold released: one unit back, the next fan in line (and only that fan) is let
        # in. The first three are past the operator's choosing time now (they hold: their
        # units are out of the stock), so only the units left count.
        self.patch(ev, stock_decide_seconds=5)
        time.sleep(5)
        r = self.rc.delete(f"/v1/holds/{holds[1]['hold_id']}", token=admitted[2])
        self.assertIn(r.status, (200, 204), r)
        self.wait_stats(ev, lambda st: st["stock_left"] == 1, "one unit back")
        got, _ = self.poll_fans(ev, tickets[3:], 3.0, until=4)
        self.assertEqual(sorted(got), [4], "the unit back goes to the next fan, in order")
        more, last = self.poll_fans(ev, tickets[4:], 0.5)
        self.assertEqual(more, {}, "one unit back, one fan let in")
        for j in last.values():
            self.assertEqual(j["state"], "queued", j)

        # The fan takes it: sold out again; confirmations of all three end the sale for good.
        last_hold = self.hold(ev, got[4], "A-1-2")
        buyers = [(holds[0], admitted[1]), (holds[2], admitted[3])]
        for h, tok in buyers:
            c = self.rc.post(f"/v1/holds/{h['hold_id']}/confirm",
                             {"payment": {"amount": h["amount"], "currency": "EUR",
                                          "source": "tok_visa"}},
                             token=tok, headers={"Idempotency-Key": uuid.uuid4().hex})
            self.assertStatus(c, 201, msg="confirmation:")
        self.wait_stats(ev, lambda st: st["stock_left"] == 0 and st["stock_held"] == 1,
                        "two sold, one held")
        _, last = self.poll_fans(ev, tickets[4:5], 0.2)
        self.assertEqual(last[5].get("returns_possible"), True, last)
        c = self.rc.post(f"/v1/holds/{last_hold['hold_id']}/confirm",
                         {"payment": {"amount": last_hold["amount"], "currency": "EUR",
                                      "source": "tok_visa"}},
                         token=got[4], headers={"Idempotency-Key": uuid.uuid4().hex})
        self.assertStatus(c, 201, msg="the last confirmation:")
        # Every seat booked: the room is sold out for good, as if the operator had said so.
        stack.wait_for(lambda: self.GS.admin("GET", f"/admin/events/{ev}").json["sold_out"], 5,
                       interval=0.1, what="the room sold out by its stock")
        for g in self.GS.gateways:
            c = g.client()
            try:
                stack.wait_for(lambda: self.status(ev, tickets[5], client=c).status == 410, 3,
                               interval=0.1, what=f"410 sold_out at {g.name}")
                self.assertStatus(self.status(ev, tickets[5], client=c), 410, "sold_out")
            finally:
                c.close()

    def test_a_passed_number_claims_nothing_while_nothing_is_left(self):
        # Fans passed before the stock ran out (their numbers under the watermark, not yet
        # claimed) are told to wait, on either gateway, until units come back.
        ev, tickets = self.event(seats=2, fans=4)
        self.patch(ev, paused=False)
        self.wait_stats(ev, lambda st: st["watermark"] >= 2, "two numbers passed")
        for i, seat in enumerate(("A-1-1", "A-1-2")):  # buyers of another way in take both
            self.hold(ev, self.GS.S.token(ev, f"walk-in-{i}-{uuid.uuid4().hex[:6]}"), seat)
        self.wait_stats(ev, lambda st: st["stock_left"] == 0, "all held")
        for g in self.GS.gateways:
            c = g.client()
            try:
                for t in tickets[:2]:
                    r = self.status(ev, t, client=c)
                    self.assertStatus(r, 200)
                    self.assertEqual((r.json["state"], r.json.get("returns_possible")),
                                     ("sold_out", True), r.json)
            finally:
                c.close()
        self.assertEqual(self.stats(ev)["admitted_total"], 0)

    def test_a_room_not_stock_aware_ignores_the_feed(self):
        ev, tickets = self.event(seats=2, fans=6, stock_aware=False)
        self.wait_stats(ev, lambda st: st["stock_left"] is None, "no stock followed")
        self.patch(ev, paused=False)
        admitted, _ = self.poll_fans(ev, tickets, 1.5)
        self.assertEqual(len(admitted), 6, "without stock_aware the rate alone decides")

    def test_show_left_tells_the_waiting_how_many_units_are_left(self):
        ev, tickets = self.event(seats=3, fans=3, show_left=True)
        # every worker of the gateway says so once it has ticked since the stock was known
        _, last = self.poll_until(ev, tickets[:1], lambda j: "left" in j)
        self.assertEqual((last[1]["state"], last[1]["left"]), ("queued", 3), last)
        self.page_says(ev, tickets[0], "3 tickets left.")
        self.page_says(ev, tickets[0], "Noch 3 Tickets.", lang="de")
        quiet, _ = self.event(seats=3, fans=1)
        r = self.status(quiet, self.join(quiet).json["ticket"])
        self.assertNotIn("left", r.json, "show_left is off by default")

    def page_says(self, ev, ticket, text, lang="en"):
        """The fan's queue page (by the ticket's cookie) says text, on whichever worker
        answers once it has ticked."""
        def check():
            c = self.GS.g.client()
            try:
                page = c.get(f"/q/{ev}", headers={"Cookie": self.cookie(ev, ticket),
                                                  "Accept-Language": lang})
            finally:
                c.close()
            self.assertEqual(page.status, 200, page)
            return text in page.body.decode()
        stack.wait_for(check, 5, interval=0.1, what=f"the page saying {text!r}")

    def cookie(self, ev, ticket):
        return f"onsale_q_{ev}={ticket}"  # gateway/gw_ticket.h GW_COOKIE_PREFIX
