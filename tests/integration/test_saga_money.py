"""No money goes missing (docs/design.md invariant 8): a checkout that holds money is
never terminal except confirmed or refunded.

- A charge request that sits in the network past the reconciler's lookup (the provider
  answers "no such charge", the checkout is released) and lands afterwards is found on the
  provider's ledger and refunded (regression: charge_landing_after_release_was_kept).
- When that refund fails, the checkout waits in `refunding` with its charge id and the
  reconciler retries until the provider confirms (regression: released_with_money).
- A charge that lands for a checkout Postgres gave up on after its hold was converted in
  Redis (the charge is recorded only with the booking since merge (b), docs/confirm.md):
  the seats convert.lua marked sold go back (unconvert) before the refund.
- A paid checkout whose booking insert keeps failing for a reason other than the unique
  constraint (here: the operator replaced the inventory while the hold lived, so the
  booking's foreign key fails) is refunded after book_max_attempts, with a metric.

The simulator's payment method "tok_sim_arrive_<ms>" holds each confirmation in the
network for <ms> (loadgen/paysim/ps_core.h; the intent reads requires_confirmation until
then); its refund_error_rate setting makes refunds fail.
"""

import signal
import time
import uuid

import stack
from stack import metric_sum, wait_for
from test_saga_crash import Reserves
from test_saga_flows import LEASE_S, SagaCase, payment, saga_stack

# Well after the buyer's drive gave up (four 1.5 s deadlines: the charge and its three
# retries, each confirmation held in the network too) and the reconciler's lookup.
ARRIVE_MS = 12000
BOOK_MAX_ATTEMPTS = 3


def setUpModule():
    orig = stack.Stack.env

    def env(self):
        e = orig(self)
        e.update({
            "ONSALE_RESERVE_LEDGER_INTERVAL_MS": "500",
            "ONSALE_RESERVE_LEDGER_SETTLE_S": "5",
            "ONSALE_RESERVE_BOOK_MAX_ATTEMPTS": str(BOOK_MAX_ATTEMPTS),
            # the ledger check must find the late charge itself: the simulator's webhook
            # (test_saga_3ds_webhooks, test_reserve_webhooks) would move it first
            "ONSALE_PAYSIM_WEBHOOK_URL": "http://127.0.0.1:9/v1/provider/webhook",
        })
        return e

    stack.Stack.env = env
    try:
        saga_stack("saga-money")
    finally:
        stack.Stack.env = orig


SEATS = [{"id": f"A-{i}", "section": "A", "price": 12000} for i in range(1, 21)]


class LateCharges(SagaCase):
    def wait_refunded(self, cid, timeout=60):
        wait_for(lambda: self.checkout_state(cid) == "refunded", timeout, interval=0.2,
                 what=f"checkout {cid} refunded (now {self.checkout_state(cid)})")

    def late_charge(self, ev, buyer, seat):
        """A confirm whose charge reaches the provider only after the checkout was
        released; returns (checkout id, charge id) once the charge has landed."""
        t = self.S.token(ev, buyer)
        h = self.hold(ev, t, seats=[seat]).json
        r = self.confirm_src(h, t, f"tok_sim_arrive_{ARRIVE_MS}")
        self.assertStatus(r, 202)
        cid = r.json["checkout_id"]
        # The provider has no charge under the key yet: the reconciler releases it.
        wait_for(lambda: self.checkout_state(cid) == "released", 40, interval=0.2,
                 what=f"checkout {cid} released")

        def landed():
            chs = [c for c in self.pay.ledger(ev)["charges"] if c["checkout"] == cid]
            return chs and chs[0]["status"] == "succeeded" and chs[0]["id"]
        charge = wait_for(landed, ARRIVE_MS / 1000 + 30, interval=0.2, what="charge landed")
        return cid, charge

    def test_charge_landing_after_release_is_found_on_the_ledger_and_refunded(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        cid, charge = self.late_charge(ev, "netdelay", "A-1")
        # released is terminal for the saga, but it holds money now: it must end refunded.
        self.wait_refunded(cid)
        tr = self.transitions(cid)
        self.assertIn(("unknown", "released"), tr)
        self.assertIn(("released", "refunding"), tr)
        self.assertEqual(tr[-1], ("refunding", "refunded"))
        self.assertEqual(self.S.sql_value(
            f"select charge_id from checkouts where checkout_id = '{cid}'"), charge)
        why = self.S.sql_value(
            f"select reason from checkout_transitions where checkout_id = '{cid}' "
            f"and to_state = 'refunding'")
        self.assertIn(charge, why, "the audit ledger names the charge")
        self.assertEqual(self.audit_event(ev), {cid: "refunded"})
        refunds = [f for f in self.pay.ledger(ev)["refunds"] if f["payment_intent"] == charge]
        self.assertEqual(len(refunds), 1, refunds)
        self.assertGreaterEqual(metric_sum(self.S.metrics(), "onsale_reserve_ledger_charges_total",
                                           outcome="refunding"), 1)

    def test_failing_refund_of_a_late_charge_is_retried_until_the_provider_confirms(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        self.pay.settings(refund_error_rate=1.0)
        self.addCleanup(self.pay.settings, refund_error_rate=0.0)
        cid, charge = self.late_charge(ev, "refundfails", "A-2")
        # It holds money: it must not rest in a terminal state other than refunded.
        wait_for(lambda: self.checkout_state(cid) == "refunding", 40, interval=0.2,
                 what=f"checkout {cid} refunding")
        first = int(self.S.sql_value(
            f"select attempts from checkouts where checkout_id = '{cid}'"))
        wait_for(lambda: int(self.S.sql_value(
            f"select attempts from checkouts where checkout_id = '{cid}'")) >= first + 2,
            60, interval=0.3, what="the reconciler retries the refund")
        self.assertEqual(self.checkout_state(cid), "refunding")
        self.assertEqual(self.S.sql_value(
            f"select charge_id from checkouts where checkout_id = '{cid}'"), charge)
        self.assertEqual(self.pay.ledger(ev)["refunds"], [])
        # The provider recovers: the next retry refunds it, once.
        self.pay.settings(refund_error_rate=0.0)
        self.wait_refunded(cid, timeout=60)
        self.assertEqual(self.audit_event(ev), {cid: "refunded"})
        t = self.S.token(ev, "refundfails")
        g = self.c.get(f"/v1/checkouts/{cid}", token=t)
        self.assertStatus(g, 200)
        self.assertEqual(g.json["state"], "refunded")


class BookingFails(SagaCase):
    def test_booking_that_keeps_failing_is_refunded_after_bounded_attempts(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        t = self.S.token(ev, "fkfail")
        h = self.hold(ev, t, seats=["A-3"]).json
        # The operator replaces the inventory while the hold lives (allowed: nothing is
        # being bought yet). The hold still converts in Redis; the booking's foreign key
        # to the seat fails in Postgres, which is not a unique conflict.
        other = [{"id": f"B-{i}", "section": "B", "price": 12000} for i in range(1, 21)]
        r = self.S.create_event(ev, seats=other, max_per_buyer=4)
        self.assertIn(r.status, (200, 201), repr(r))
        before = metric_sum(self.S.metrics(), "onsale_reserve_bookings_abandoned_total")
        r = self.confirm_src(h, t, "tok_visa")
        self.assertIn(r.status, (202, 503), repr(r))
        cid = self.S.sql_value(f"select checkout_id from checkouts where event_id = '{ev}'")
        self.assertEqual(self.wait_terminal([cid], timeout=LEASE_S * 3 + 60)[cid], "refunded")
        self.assertEqual(self.S.sql_value(
            f"select book_failures from checkouts where checkout_id = '{cid}'"),
            str(BOOK_MAX_ATTEMPTS))
        self.assertIn(("paid", "refunding"), self.transitions(cid))
        self.assertEqual(self.audit_event(ev), {cid: "refunded"})
        self.assertEqual(metric_sum(self.S.metrics(), "onsale_reserve_bookings_abandoned_total"),
                         before + 1)
        g = self.c.get(f"/v1/checkouts/{cid}", token=t)
        self.assertEqual(g.json["state"], "refunded", repr(g))
        self.assertEqual(g.json["refund"]["reason"], "booking_failed", repr(g))


class LateChargeAfterConversion(SagaCase):
    def setUp(self):
        super().setUp()
        self.r = Reserves(self.S)
        self.addCleanup(self.r.stop_all)

    def test_late_charge_of_a_converted_hold_gives_the_seat_back_then_refunds(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        t = self.S.token(ev, "lateconv")
        # A drive that dies after the charge and convert.lua, before the booking's commit:
        # the seat is sold in Redis, the checkout still payment_requested (merge (b)).
        p = self.r.start({"ONSALE_RESERVE_FAULT": "before:converted",
                          "ONSALE_RESERVE_RECONCILE_INTERVAL_MS": "600000"})
        h = self.hold(ev, t, seats=["A-9"]).json
        c = self.r.client(p, timeout=15)
        try:
            with self.assertRaises(Exception):  # the process dies mid-request
                c.post(f"/v1/holds/{h['hold_id']}/confirm", payment(h["amount"]), token=t,
                       headers={"Idempotency-Key": uuid.uuid4().hex})
        finally:
            c.close()
        self.assertEqual(p.wait(timeout=15), -signal.SIGKILL)
        cid = self.S.sql_value(f"select checkout_id from checkouts where event_id = '{ev}'")
        self.assertEqual(self.checkout_state(cid), "payment_requested")
        t2 = self.S.token(ev, "lateconv2")
        self.hold(ev, t2, seats=["A-9"], expect=409)  # sold in Redis
        # Postgres gives up on it as unpaid (what a reconciler told "no such charge" by a
        # lagging provider does); the provider's ledger then shows the charge.
        self.assertEqual(self.S.sql(
            f"select applied from onsale_saga_step('{cid}', '{{payment_requested}}'::text[], "
            "'released', 'the provider has no charge under this checkout''s key', NULL, NULL, "
            "NULL, NULL::int, NULL, NULL)"), [["t"]])
        wait_for(lambda: self.checkout_state(cid) == "refunded", 60, interval=0.2,
                 what=f"checkout {cid} refunded (now {self.checkout_state(cid)})")
        self.assertEqual(self.S.sql_value(
            f"select refund_reason from checkouts where checkout_id = '{cid}'"), "late_charge")
        self.assertIn(("released", "refunding"), self.transitions(cid))
        self.assertEqual(self.S.sql_value(
            f"select count(*) from bookings where event_id = '{ev}'"), "0")
        # The seat convert.lua marked sold is on sale again; the money went back once. A
        # worker that saw it sold may say so for up to one snapshot more (docs/api.md: the
        # availability lag; rsv_avail.h, sold marks): within a few seconds, not at once.
        wait_for(lambda: self.hold(ev, t2, seats=["A-9"], expect=None).status == 201, 5,
                 interval=0.2, what="A-9 on sale again")
        led = self.pay.ledger(ev)
        self.assertEqual(len(led["refunds"]), 1, led)
        self.assertEqual(self.audit_event(ev), {cid: "refunded"})
