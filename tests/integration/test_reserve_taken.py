"""Losers hear "taken" at once (item 5): a hold asking for a seat that is sold
is answered 409 seat_unavailable from the reserve worker's memory of sold seats, with no
hold script — the hold script's TAKEN answer says which seats are sold, and the worker
believes that for avail_max_age_ms (reserve/rsv_avail.h). Held seats (a hold can expire)
and holds with an Idempotency-Key (a retry of a hold that was then bought must get its
hold back) still ask Redis every time.

Work is counted, not timed: event_scripts (test_reserve_records) MONITORs every Redis of
the stack and counts the scripts that named the event's keys."""

import math
import time
import uuid

import stack
from stack import metric_sum
from test_reserve_records import event_scripts

SEATS = [{"id": f"A-{i}", "section": "A", "price": 12000} for i in range(1, 7)]
GA = [{"id": "ga", "capacity": 2, "price": 3000}]
LOSERS = 40


def setUpModule():
    stack.module_stack("taken")


class SoldSeatsCostNoScript(stack.ReserveTestCase):
    def workers(self):
        """Reserve workers of the stack (every reserve's, in the cluster topology): each
        keeps its own sold marks, so each may run one script to learn a seat is sold."""
        return int(metric_sum(self.S.metrics(), "onsale_reserve_workers")) or 1

    def sell(self, ev, seat=None, key=None, quantity=None):
        tok = self.S.token(ev, f"buyer-{uuid.uuid4().hex[:8]}")
        headers = {"Idempotency-Key": key} if key else None
        body = {"seats": [seat]} if seat else {"pool": "ga", "quantity": quantity}
        h = self.c.post(f"/v1/events/{ev}/holds", body, token=tok, headers=headers)
        self.assertStatus(h, 201, msg="the buyer's hold:")
        r = self.confirm(h.json["hold_id"], tok, h.json["amount"])
        self.assertStatus(r, 201, msg="the buyer's confirmation:")
        return tok, h.json["hold_id"]

    def losers_on(self, ev, seats=None, n=LOSERS):
        """n buyers with fresh tokens ask for seats (None: a unit of the pool); returns
        (answers, scripts run, seconds)."""
        toks = self.S.tokens(ev, f"loser-{uuid.uuid4().hex[:8]}", n)
        answers = []

        def ask():
            for t in toks:
                if seats is None:
                    answers.append(self.hold(ev, t, pool="ga", quantity=1, expect=None))
                else:
                    answers.append(self.hold(ev, t, seats=seats, expect=None))
        t0 = time.monotonic()
        spent = event_scripts(self.S, ev, ask)
        return answers, spent, time.monotonic() - t0

    def test_holds_on_a_sold_seat_run_no_script(self):
        ev = self.new_event(seats=SEATS)
        self.sell(ev, "A-1")
        answers, spent, took = self.losers_on(ev, ["A-1"])
        for r in answers:
            self.assertStatus(r, 409, "seat_unavailable")
            self.assertEqual(r.json["unavailable"], ["A-1"])
        # Each worker learns once; a mark is believed avail_max_age_ms (1 s here), so a
        # slow machine (ASan) may make a worker learn it again once a second.
        bound = self.workers() * (math.ceil(took) + 1)
        self.assertLessEqual(spent, bound,
                             f"{LOSERS} holds on a sold seat ran {spent} hold scripts in "
                             f"{took:.1f} s (at most {bound}: one per worker per second)")
        # all or nothing: a sold seat among free ones refuses the hold, naming it alone
        r = self.hold(ev, self.S.token(ev, "mixed"), seats=["A-2", "A-1"], expect=409)
        self.assertEqual(r.json["unavailable"], ["A-1"])
        # and nothing was held: A-2 is still free for the next buyer
        self.hold(ev, self.S.token(ev, "next"), seats=["A-2"])

    def test_holds_on_a_sold_out_pool_run_no_script(self):
        ev = self.new_event(pools=GA)
        self.sell(ev, quantity=2)
        answers, spent, took = self.losers_on(ev)
        for r in answers:
            self.assertStatus(r, 409, "sold_out")
        bound = self.workers() * (math.ceil(took) + 1)
        self.assertLessEqual(spent, bound,
                             f"{LOSERS} holds on a sold-out pool ran {spent} hold scripts in "
                             f"{took:.1f} s (at most {bound}: one per worker per second)")

    def test_holds_on_a_pool_with_a_unit_held_still_ask_redis(self):
        # one unit sold, the other held: the hold may expire, so the pool is not sold out
        ev = self.new_event(pools=GA)
        self.sell(ev, quantity=1)
        self.hold(ev, self.S.token(ev, "holder"), pool="ga", quantity=1)
        answers, spent, _ = self.losers_on(ev, n=5)
        for r in answers:
            self.assertStatus(r, 409, "sold_out")
        self.assertGreaterEqual(spent, 5, "every hold on a pool with a live hold runs a script")

    def test_holds_on_a_held_seat_still_ask_redis(self):
        # a hold can expire at any moment: only Redis knows whether the seat is free
        ev = self.new_event(seats=SEATS)
        self.hold(ev, self.S.token(ev, "holder"), seats=["A-3"])
        answers, spent, _ = self.losers_on(ev, ["A-3"], n=5)
        for r in answers:
            self.assertStatus(r, 409, "seat_unavailable")
            self.assertEqual(r.json["unavailable"], ["A-3"])
        self.assertGreaterEqual(spent, 5, "every hold on a held seat runs the hold script")

    def test_retry_of_a_bought_hold_gets_its_hold_not_taken(self):
        ev = self.new_event(seats=SEATS)
        key = uuid.uuid4().hex
        tok, hid = self.sell(ev, "A-4", key=key)
        answers, _, _ = self.losers_on(ev, ["A-4"], n=4)  # every worker learns A-4 is sold
        for r in answers:
            self.assertStatus(r, 409, "seat_unavailable")
        r = self.c.post(f"/v1/events/{ev}/holds", {"seats": ["A-4"]}, token=tok,
                        headers={"Idempotency-Key": key})
        self.assertStatus(r, 200, msg="the buyer's retry with the same key:")
        self.assertEqual((r.json["hold_id"], r.json["state"]), (hid, "converted"))

    def test_bad_tokens_are_refused_before_the_seat_map(self):
        ev = self.new_event(seats=SEATS)
        self.sell(ev, "A-5")
        self.losers_on(ev, ["A-5"], n=4)
        r = self.hold(ev, "not-a-token", seats=["A-5"], expect=401)
        self.assertEqual(r.err, "invalid_token")
        other = self.new_event(seats=SEATS)
        r = self.hold(ev, self.S.token(other, "elsewhere"), seats=["A-5"], expect=403)
        self.assertEqual(r.err, "wrong_event")
