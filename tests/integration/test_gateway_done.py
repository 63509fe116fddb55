"""A fan who is finished frees their place in max_active at once: an admitted fan tells the
reserve `POST /v1/events/{event}/done` with their admission token, and the gateways admit
the next fan on their next tick instead of after admission_ttl_seconds. Only the token's
own fan leaves the count (nobody frees another's place, saying it twice changes nothing),
and a fan still holding seats stays counted until that hold ends.

Runs against a real stack: two gateways and the reserve sharing one Redis."""

import time

import gwstack
import stack
from gwstack import ticket_fields, ticket_number

MAX_ACTIVE = 4
TTL = 600  # far beyond the test: any place freed here was freed by "done"


def setUpModule():
    gwstack.module_stack("gw-done", gateways=2)


class Done(gwstack.GatewayTestCase):
    def setUp(self):
        super().setUp()
        self.rc = self.GS.S.client()  # the reserve's buyer API
        self.addCleanup(self.rc.close)

    def active_now(self, ev):
        ms = int(time.time() * 1000)
        return int(self.GS.redis("ZCOUNT", f"os:{{{ev}}}:active", f"({ms}", "+inf"))

    def done(self, ev, token):
        return self.rc.post(f"/v1/events/{ev}/done", token=token)

    def full_room(self, fans):
        """A room at max_active: MAX_ACTIVE of `fans` admitted, the rest waiting."""
        ev = self.new_room(rate_per_minute=6000, max_active=MAX_ACTIVE, paused=True,
                           noshow_grace_seconds=3600, admission_ttl_seconds=TTL, mode="fifo")
        tickets = sorted(self.burst_join(ev, fans), key=ticket_number)
        self.patch(ev, paused=False)
        admitted = {}
        self.poll_fans(ev, tickets, 2.0, admitted)
        self.assertEqual(sorted(admitted), list(range(1, MAX_ACTIVE + 1)),
                         f"max_active {MAX_ACTIVE} should admit the first {MAX_ACTIVE}")
        self.assertEqual(self.active_now(ev), MAX_ACTIVE)
        return ev, tickets, admitted

    def test_finished_fans_admit_the_next_at_once_and_only_their_own_place(self):
        ev, tickets, admitted = self.full_room(10)
        # Nobody frees a place with a bad token, a token of another room, or none.
        other_ev, _, other = self.full_room(MAX_ACTIVE)
        self.assertStatus(self.done(ev, other[1]), 403, "wrong_event")
        self.assertStatus(self.done(ev, admitted[1] + "x"), 401, "invalid_token")
        self.assertStatus(self.rc.post(f"/v1/events/{ev}/done"), 401, "invalid_token")
        self.assertStatus(self.done("bad*event", admitted[1]), 400, "invalid_request")
        self.assertStatus(self.rc.get(f"/v1/events/{ev}/done", token=admitted[1]), 405)
        self.assertEqual(self.active_now(ev), MAX_ACTIVE)
        self.assertEqual(self.active_now(other_ev), MAX_ACTIVE)

        # Two fans are done: exactly two more fans get in, long before the TTL.
        t0 = time.monotonic()
        for num in (1, 3):
            r = self.done(ev, admitted[num])
            self.assertStatus(r, 200, msg=f"done of {num}:")
            self.assertEqual(r.json, {"event": ev, "active": False})
        _, _, _, v1 = ticket_fields(tickets[0])
        self.assertIsNone(self.GS.redis("ZSCORE", f"os:{{{ev}}}:active", v1))
        self.poll_fans(ev, tickets, 1.5, admitted)
        self.assertEqual(sorted(admitted), list(range(1, MAX_ACTIVE + 3)),
                         "two fans done should let exactly the next two in")
        self.assertLess(time.monotonic() - t0, 10)
        self.assertEqual(self.active_now(ev), MAX_ACTIVE)

        # Saying it again (or polling the gateway again) frees nothing more.
        self.assertStatus(self.done(ev, admitted[1]), 200)
        self.assertEqual(self.status(ev, tickets[0]).json["state"], "admitted")
        self.poll_fans(ev, tickets, 1.0, admitted)
        self.assertEqual(len(admitted), MAX_ACTIVE + 2)
        self.assertEqual(self.active_now(ev), MAX_ACTIVE)
        st = self.GS.admin("GET", f"/admin/events/{ev}").json["stats"]
        self.assertEqual(st["admitted_total"], MAX_ACTIVE + 2)

    def test_a_fan_holding_seats_stays_counted_until_the_hold_ends(self):
        ev, tickets, admitted = self.full_room(6)
        r = self.GS.S.admin("PUT", f"/admin/events/{ev}", {
            "sections": [{"id": "A", "rows": 1, "seats_per_row": 4, "price": 1000}],
            "currency": "EUR", "hold_ttl_seconds": 300})
        self.assertIn(r.status, (200, 201), f"reserve inventory: {r!r}")
        stack.wait_for(lambda: self.rc.get(f"/v1/events/{ev}/availability").status == 200, 5,
                       what="the event in the reserve's catalogue")
        h = self.rc.post(f"/v1/events/{ev}/holds", {"seats": ["A-1-1"]}, token=admitted[2])
        self.assertStatus(h, 201, msg="hold:")
        r = self.done(ev, admitted[2])
        self.assertStatus(r, 200)
        self.assertTrue(r.json["active"], f"a fan holding a seat is still shopping: {r.json}")
        self.assertEqual(r.json["active_until"], h.json["expires_at"])
        self.poll_fans(ev, tickets, 1.0, admitted)
        self.assertEqual(len(admitted), MAX_ACTIVE, "a fan still holding seats freed a place")
        # The hold released: the place frees (the release rule), the next fan gets in.
        rel = self.rc.delete(f"/v1/holds/{h.json['hold_id']}", token=admitted[2])
        self.assertStatus(rel, 204)
        self.poll_fans(ev, tickets, 1.5, admitted)
        self.assertEqual(sorted(admitted), list(range(1, MAX_ACTIVE + 2)))
