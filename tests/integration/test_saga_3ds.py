"""3-D Secure end to end without a browser (docs/api.md "3-D Secure"): a charge the
simulator answers requires_action puts the checkout in requires_action (202 with
next_action, the hold extended to its max life); the simulator's challenge page
(/v1/sim/authenticate/{id}?token=…) is answered directly, and the outcome comes from the
reconciler's lookup — the simulator's webhooks are lost here (sent to a closed port;
test_saga_3ds_webhooks has them delivered): approve → confirmed and charged once, fail → failed with nothing
charged, never answered → released when the hold's max life passes and the intent
canceled at the provider. A forged answer (wrong token, another answer) changes nothing.
"""

import http.client
import os
import re
import ssl
import time
import urllib.parse

import stack
from test_saga_flows import SagaCase, SagaStack

SEATS = [{"id": f"S-{i}", "section": "S", "price": 4200} for i in range(1, 21)]
THREEDS = "pm_card_threeDSecure2Required"


class LostHooksStack(SagaStack):
    """The saga stack whose simulator sends every webhook to a port nobody listens on:
    every outcome here is the reconciler's own lookup."""

    def env(self):
        e = super().env()
        e["ONSALE_PAYSIM_WEBHOOK_URL"] = "http://127.0.0.1:9/v1/provider/webhook"
        return e


def setUpModule():
    stack.module_own_stack(LostHooksStack("saga-3ds"))


class ThreeDS(SagaCase):
    def page(self, method, url, form=None):
        """One browser-like request to the simulator's page; (status, body, headers)."""
        u = urllib.parse.urlsplit(url)
        ctx = ssl.create_default_context(cafile=os.path.join(self.S.state, "ca.pem"))
        c = http.client.HTTPSConnection("127.0.0.1", self.S.paysim_port, context=ctx, timeout=10)
        try:
            path = u.path + (f"?{u.query}" if u.query else "")
            h = {"Content-Type": "application/x-www-form-urlencoded"} if form is not None else {}
            c.request(method, path, body=urllib.parse.urlencode(form) if form else None,
                      headers=h)
            r = c.getresponse()
            return r.status, r.read().decode(), {k.lower(): v for k, v in r.getheaders()}
        finally:
            c.close()

    def start(self, ev, who, seat):
        t = self.S.token(ev, who)
        h = self.hold(ev, t, seats=[seat]).json
        r = self.confirm_src(h, t, THREEDS)
        self.assertStatus(r, 202)
        self.assertEqual(r.json["state"], "requires_action", r.json)
        na = r.json["next_action"]
        self.assertEqual(na["type"], "redirect_to_url")
        self.assertIn("/v1/sim/authenticate/", na["redirect_to_url"]["url"])
        return t, h, r.json["checkout_id"], na["redirect_to_url"]["url"]

    def answer(self, url, answer, token=None):
        tok = token if token is not None else urllib.parse.parse_qs(
            urllib.parse.urlsplit(url).query)["token"][0]
        return self.page("POST", url.split("?")[0], {"token": tok, "answer": answer})

    def test_approve_books_the_checkout_and_charges_once(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        t, h, cid, url = self.start(ev, "approver", "S-1")
        self.assertEqual(self.checkout_state(cid), "requires_action")
        # The buyer sees the same: requires_action with where to go.
        g = self.c.get(f"/v1/checkouts/{cid}", token=t)
        self.assertStatus(g, 200)
        self.assertEqual(g.json["state"], "requires_action")
        self.assertEqual(g.json["next_action"]["redirect_to_url"]["url"], url)
        # The hold now lives as long as it may.
        hv = self.c.get(f"/v1/holds/{h['hold_id']}", token=t)
        self.assertStatus(hv, 200)
        self.assertEqual(hv.json["expires_at"], hv.json["max_expires_at"], hv.json)
        # The challenge page: HTML, no script, a CSP that allows none.
        st, html, hdr = self.page("GET", url)
        self.assertEqual(st, 200, html)
        self.assertTrue(hdr["content-type"].startswith("text/html"))
        self.assertIn("default-src 'none'", hdr["content-security-policy"])
        self.assertNotIn("<script", html.lower())
        self.assertIn('value="approve"', html)
        st, body, hdr = self.answer(url, "approve")
        self.assertEqual(st, 302, body)
        self.assertIn("redirect_status=succeeded", hdr["location"])
        states = self.wait_terminal([cid], timeout=30)
        self.assertEqual(states[cid], "confirmed")
        self.assertIn(("payment_requested", "requires_action"), self.transitions(cid))
        self.assertIn(("requires_action", "paid"), self.transitions(cid))
        self.assertEqual(self.audit_event(ev), {cid: "charged+booked"})
        # Answered once: the page does not take a second answer.
        st, _, _ = self.answer(url, "fail")
        self.assertEqual(st, 409)

    def test_fail_ends_failed_with_nothing_charged(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        t, h, cid, url = self.start(ev, "failer", "S-2")
        st, body, hdr = self.answer(url, "fail")
        self.assertEqual(st, 302, body)
        self.assertIn("redirect_status=failed", hdr["location"])
        states = self.wait_terminal([cid], timeout=30)
        self.assertEqual(states[cid], "failed")
        self.assertIn(("requires_action", "declined"), self.transitions(cid))
        g = self.c.get(f"/v1/checkouts/{cid}", token=t)
        self.assertEqual(g.json["state"], "failed")
        self.assertNotIn("next_action", g.json)
        self.assertEqual(self.audit_event(ev), {cid: "nothing"})
        # The buyer can give the seat back and it is free again.
        rel = self.c.delete(f"/v1/holds/{h['hold_id']}", token=t)
        self.assertIn(rel.status, (200, 204), repr(rel))
        other = self.S.token(ev, "next-buyer")
        self.hold(ev, other, seats=["S-2"])

    def test_a_repeated_confirm_while_waiting_answers_the_same_next_action(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        t = self.S.token(ev, "repeater")
        h = self.hold(ev, t, seats=["S-3"]).json
        key = "rep-" + ev
        r = self.confirm_src(h, t, THREEDS, key=key)
        self.assertStatus(r, 202)
        again = self.confirm_src(h, t, THREEDS, key=key)
        self.assertStatus(again, 202)
        self.assertEqual(again.json["state"], "requires_action")
        self.assertEqual(again.json["next_action"], r.json["next_action"])
        # Nothing was charged by asking again: one intent, still waiting.
        pi = self.pay.intent_of(r.json["checkout_id"])
        self.assertEqual(pi["status"], "requires_action")
        self.answer(r.json["next_action"]["redirect_to_url"]["url"], "approve")
        self.assertEqual(self.wait_terminal([r.json["checkout_id"]])[r.json["checkout_id"]],
                         "confirmed")

    def test_abandoned_is_released_and_the_intent_canceled(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4, hold_ttl_seconds=2,
                            checkout_extension_seconds=1, max_hold_seconds=4)
        t, h, cid, url = self.start(ev, "walker", "S-4")
        states = self.wait_terminal([cid], timeout=40)
        self.assertEqual(states[cid], "released")
        self.assertIn(("requires_action", "released"), self.transitions(cid))
        pi = self.pay.intent_of(cid)
        self.assertEqual(pi["status"], "canceled", pi)
        self.assertEqual(pi["cancellation_reason"], "abandoned")
        g = self.c.get(f"/v1/checkouts/{cid}", token=t)
        self.assertEqual(g.json["state"], "released")
        # Too late to approve now: nothing is charged.
        st, _, _ = self.answer(url, "approve")
        self.assertEqual(st, 409)
        self.assertEqual(self.audit_event(ev), {cid: "nothing"})

    def test_a_forged_answer_changes_nothing(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        t, h, cid, url = self.start(ev, "forged", "S-5")
        pid = re.search(r"/authenticate/([A-Za-z0-9_]+)", url).group(1)
        st, _, _ = self.answer(url, "approve", token="acs_" + "0" * 24)
        self.assertEqual(st, 403)
        st, _, _ = self.answer(url, "approve", token="")
        self.assertEqual(st, 403)
        st, _, _ = self.page("GET", url.split("?")[0] + "?token=nope")
        self.assertEqual(st, 403)
        st, _, _ = self.answer(url, "maybe")
        self.assertEqual(st, 400)
        st, _, _ = self.page("POST", url.split("?")[0], {"answer": "approve"})
        self.assertEqual(st, 403)
        st, _, _ = self.page("GET", "https://127.0.0.1/v1/sim/authenticate/pi_nosuch?token=x")
        self.assertEqual(st, 404)
        time.sleep(1.5)  # the reconciler looked meanwhile: still waiting
        self.assertEqual(self.checkout_state(cid), "requires_action")
        st, doc = self.pay.request("GET", f"/v1/payment_intents/{pid}")
        self.assertEqual(doc["status"], "requires_action")
        self.answer(url, "approve")
        self.assertEqual(self.wait_terminal([cid])[cid], "confirmed")


class Cancel(SagaCase):
    def form(self, path, form, key=None):
        import urllib.parse as up
        ctx = ssl.create_default_context(cafile=os.path.join(self.S.state, "ca.pem"))
        c = http.client.HTTPSConnection("127.0.0.1", self.S.paysim_port, context=ctx, timeout=10)
        try:
            h = {"Content-Type": "application/x-www-form-urlencoded"}
            if key:
                h["Idempotency-Key"] = key
            c.request("POST", path, body=up.urlencode(form), headers=h)
            r = c.getresponse()
            import json
            return r.status, json.loads(r.read())
        finally:
            c.close()

    def test_cancel_a_waiting_intent_once_and_refuse_a_settled_one(self):
        st, pi = self.form("/v1/payment_intents", {"amount": "500", "currency": "eur",
                                                   "payment_method": THREEDS, "confirm": "true",
                                                   "return_url": "https://shop.example/r"})
        self.assertEqual((st, pi["status"]), (200, "requires_action"), pi)
        path = f"/v1/payment_intents/{pi['id']}/cancel"
        st, c1 = self.form(path, {"cancellation_reason": "abandoned"}, key="cn-" + pi["id"])
        self.assertEqual((st, c1["status"]), (200, "canceled"), c1)
        st, c2 = self.form(path, {"cancellation_reason": "abandoned"}, key="cn-" + pi["id"])
        self.assertEqual(c2, c1)  # replayed under its key
        st, e = self.form(path, {})
        self.assertEqual(st, 400)
        self.assertEqual(e["error"]["code"], "payment_intent_unexpected_state")
        st, e = self.form(path, {"cancellation_reason": "bored"})
        self.assertEqual(st, 400)
        st, ok = self.form("/v1/payment_intents", {"amount": "500", "currency": "eur",
                                                   "payment_method": "pm_card_visa",
                                                   "confirm": "true"})
        self.assertEqual(ok["status"], "succeeded")
        st, e = self.form(f"/v1/payment_intents/{ok['id']}/cancel", {})
        self.assertEqual(st, 400)
        self.assertEqual(e["error"]["payment_intent"]["status"], "succeeded")
