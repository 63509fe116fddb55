"""3-D Secure decided by the simulator's webhooks (docs/api.md "3-D Secure", "Provider
webhooks"): deploy/onsale up gives the simulator and the reserve one signing secret, the
simulator POSTs a Stripe-signed event for every status change, and the reserve's
reconciler here never looks at a checkout on its own within a test (reconcile_after_s
3600) — so an approved or failed challenge is decided within seconds only through the
webhook's nudge. The webhook racing the buyer's own repeated confirm moves the checkout
once; a challenge approved after the hold's max life is paid and refunded (the late-charge
path), never booked.
"""

import time

import stack
import test_saga_3ds as base
from test_saga_flows import SagaStack
from stack import metric_sum

THREEDS, SEATS = base.THREEDS, base.SEATS


class HooksOnlyStack(SagaStack):
    def env(self):
        e = super().env()
        e["ONSALE_RESERVE_RECONCILE_AFTER_S"] = "3600"
        return e


def setUpModule():
    stack.module_own_stack(HooksOnlyStack("saga-3ds-hooks"))


class Webhooks(base.ThreeDS):
    # The base class's tests need the reconciler's own lookups (abandon): not here.
    test_abandoned_is_released_and_the_intent_canceled = None
    test_a_forged_answer_changes_nothing = None
    test_fail_ends_failed_with_nothing_charged = None
    test_approve_books_the_checkout_and_charges_once = None
    test_a_repeated_confirm_while_waiting_answers_the_same_next_action = None

    def webhook_count(self, outcome):
        return metric_sum(self.S.metrics(), "onsale_reserve_provider_webhooks_total",
                          outcome=outcome)

    def test_the_webhook_books_an_approved_challenge(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        before = self.webhook_count("nudged")
        t, h, cid, url = self.start(ev, "hooked", "S-11")
        st, _, _ = self.answer(url, "approve")
        self.assertEqual(st, 302)
        self.assertEqual(self.wait_terminal([cid], timeout=20)[cid], "confirmed")
        self.assertGreater(self.webhook_count("nudged"), before)
        self.assertEqual(self.audit_event(ev), {cid: "charged+booked"})
        # Each webhook is kept once by its id: the checkout moved once to paid.
        self.assertEqual([m for m in self.transitions(cid) if m[1] == "paid"],
                         [("requires_action", "paid")])

    def test_the_webhook_fails_a_failed_challenge(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        t, h, cid, url = self.start(ev, "hookfail", "S-12")
        self.answer(url, "fail")
        self.assertEqual(self.wait_terminal([cid], timeout=20)[cid], "failed")
        self.assertEqual(self.audit_event(ev), {cid: "nothing"})

    def test_approved_after_the_hold_expired_is_refunded(self):
        # The fan answers only after the hold's max life; the webhook's nudge finds the
        # intent succeeded: paid, but the hold is gone — refunded, never booked.
        ev = self.new_event(seats=SEATS, max_per_buyer=4, hold_ttl_seconds=2,
                            checkout_extension_seconds=1, max_hold_seconds=3)
        t, h, cid, url = self.start(ev, "latecomer", "S-14")
        time.sleep(4)
        self.assertEqual(self.checkout_state(cid), "requires_action")
        st, _, _ = self.answer(url, "approve")
        self.assertEqual(st, 302)
        self.assertEqual(self.wait_terminal([cid], timeout=20)[cid], "refunded")
        moves = self.transitions(cid)
        self.assertIn(("requires_action", "paid"), moves)
        self.assertIn(("paid", "refunding"), moves)
        self.assertEqual(self.audit_event(ev), {cid: "refunded"})

    def test_webhook_and_the_buyers_retry_racing_move_once(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        t = self.S.token(ev, "racer")
        h = self.hold(ev, t, seats=["S-13"]).json
        key = "race-" + ev
        r = self.confirm_src(h, t, THREEDS, key=key)
        self.assertStatus(r, 202)
        cid = r.json["checkout_id"]
        self.answer(r.json["next_action"]["redirect_to_url"]["url"], "approve")
        # The buyer's repeated confirm (a lookup) races the webhook's nudge (the reconciler).
        answers = []
        deadline = time.time() + 20
        while time.time() < deadline:
            a = self.confirm_src(h, t, THREEDS, key=key)
            answers.append(a.status)
            if a.status in (200, 201):
                break
            time.sleep(0.1)
        self.assertIn(answers[-1], (200, 201), answers)
        self.assertEqual(self.wait_terminal([cid])[cid], "confirmed")
        moves = self.transitions(cid)
        self.assertEqual(len([m for m in moves if m[1] == "paid"]), 1, moves)
        self.assertEqual(len([m for m in moves if m[1] == "confirmed"]), 1, moves)
        self.assertEqual(self.audit_event(ev), {cid: "charged+booked"})
