"""The simulator speaks Stripe's PaymentIntents surface as Stripe's OpenAPI description
says (tests/fixtures/stripe/spec.json, extracted from github.com/stripe/openapi): every
answer carries the fields the spec marks required of its object, with the spec's types,
statuses and error types; the operations take form bodies, refuse undocumented
parameters, replay stored answers under an Idempotency-Key, and refund in parts up to
the amount, refusing an over-refund with Stripe's error.

Against the saga stack's simulator directly (plain form requests, no reserve).
"""

import http.client
import json
import os
import ssl
import urllib.parse
import uuid

from test_saga_flows import SagaCase, saga_stack

SPEC = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                   "fixtures", "stripe", "spec.json")))
OBJECTS = SPEC["objects"]

TYPES = {"string": str, "integer": int, "boolean": bool, "object": dict, "array": list}


def setUpModule():
    saga_stack("saga-stripe")


class Stripe(SagaCase):
    def call(self, method, path, form=None, key=None):
        """One request as Stripe's libraries send it; (status, body, headers)."""
        ctx = ssl.create_default_context(cafile=os.path.join(self.S.state, "ca.pem"))
        c = http.client.HTTPSConnection("127.0.0.1", self.S.paysim_port, context=ctx,
                                        timeout=10)
        try:
            h = {"Content-Type": "application/x-www-form-urlencoded"}
            if key:
                h["Idempotency-Key"] = key
            body = urllib.parse.urlencode(form) if form is not None else None
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            data = r.read()
            return r.status, (json.loads(data) if data else None), dict(r.getheaders())
        finally:
            c.close()

    def conforms(self, kind, obj):
        """obj has every field the spec requires of kind, each read field of its type."""
        spec = OBJECTS[kind]
        self.assertIsInstance(obj, dict, f"{kind}: {obj!r}")
        for f in spec["required"]:
            self.assertIn(f, obj, f"{kind} lacks required {f}: {obj!r}")
        for f, t in spec["fields"].items():
            v = obj.get(f)
            if v is None:
                continue
            alts = [TYPES.get(a.rstrip("?")) for a in t.split("|")]
            if any(a is None for a in alts):  # a $ref: an object (or an expandable id)
                alts = [x for x in alts if x] + [dict]
            self.assertIsInstance(v, tuple(alts), f"{kind}.{f} is {v!r}, the spec says {t}")
        if "status_enum" in spec and "status" in obj:
            self.assertIn(obj["status"], spec["status_enum"], f"{kind}.status")
        if kind == "payment_intent":
            self.assertEqual(obj["object"], "payment_intent")

    def error(self, st, doc, status, type_, code=None, param=None):
        self.assertEqual(st, status, doc)
        self.assertIn("error", doc)
        e = doc["error"]
        for f in OBJECTS["api_errors"]["required"]:
            self.assertIn(f, e)
        self.assertIn(e["type"], OBJECTS["api_errors"]["type_enum"])
        self.assertEqual(e["type"], type_, e)
        if code:
            self.assertEqual(e.get("code"), code, e)
        if param:
            self.assertEqual(e.get("param"), param, e)
        return e

    def create(self, pm="pm_card_visa", amount=5000, key=None, **extra):
        form = {"amount": str(amount), "currency": "eur", "payment_method": pm,
                "payment_method_types[]": "card", "metadata[checkout]": key or "co_x",
                "metadata[event]": "stripe-shape"}
        form.update(extra)
        return self.call("POST", "/v1/payment_intents", form, key or uuid.uuid4().hex)

    def paid_intent(self, amount=5000):
        st, pi, _ = self.create(amount=amount)
        self.assertEqual(st, 200, pi)
        st, pi, _ = self.call("POST", f"/v1/payment_intents/{pi['id']}/confirm",
                              {"return_url": "https://shop.example/r"}, uuid.uuid4().hex)
        self.assertEqual((st, pi["status"]), (200, "succeeded"), pi)
        return pi

    def test_create_confirm_retrieve_list_carry_the_required_fields(self):
        key = uuid.uuid4().hex
        st, pi, _ = self.create(key=key)
        self.assertEqual(st, 200, pi)
        self.conforms("payment_intent", pi)
        self.assertEqual(pi["status"], "requires_confirmation")
        self.assertEqual((pi["amount"], pi["currency"], pi["metadata"]["checkout"]),
                         (5000, "eur", key))
        st, done, _ = self.call("POST", f"/v1/payment_intents/{pi['id']}/confirm",
                                {"return_url": "https://shop.example/r"}, "cf_" + key)
        self.assertEqual(st, 200, done)
        self.conforms("payment_intent", done)
        self.assertEqual((done["status"], done["amount_received"]), ("succeeded", 5000))
        self.assertTrue(done["latest_charge"].startswith("ch_"))
        st, got, _ = self.call("GET", f"/v1/payment_intents/{pi['id']}?expand[]=latest_charge")
        self.assertEqual(st, 200, got)
        self.conforms("payment_intent", got)
        self.conforms("charge", got["latest_charge"])
        self.assertEqual(got["latest_charge"]["payment_intent"], pi["id"])
        q = urllib.parse.urlencode({"created[gte]": pi["created"], "limit": 100,
                                    "expand[]": "data.latest_charge"})
        st, lst, _ = self.call("GET", f"/v1/payment_intents?{q}")
        self.assertEqual(st, 200, lst)
        for f in OBJECTS["list"]["required"]:
            self.assertIn(f, lst)
        self.assertEqual(lst["object"], "list")
        mine = [x for x in lst["data"] if x["id"] == pi["id"]]
        self.assertEqual(len(mine), 1)
        for x in lst["data"]:
            self.conforms("payment_intent", x)
        # newest first, and starting_after pages on to older ones
        created = [x["created"] for x in lst["data"]]
        self.assertEqual(created, sorted(created, reverse=True))
        st, page, _ = self.call("GET", "/v1/payment_intents?limit=1")
        self.assertEqual((st, len(page["data"]), page["has_more"]), (200, 1, True), page)
        st, nxt, _ = self.call("GET",
                               f"/v1/payment_intents?limit=1&starting_after={page['data'][0]['id']}")
        self.assertEqual(st, 200, nxt)
        self.assertNotEqual(nxt["data"][0]["id"], page["data"][0]["id"])

    def test_a_decline_is_a_402_card_error_with_the_intent(self):
        st, pi, _ = self.create(pm="pm_card_chargeDeclined")
        st, doc, _ = self.call("POST", f"/v1/payment_intents/{pi['id']}/confirm", {},
                               uuid.uuid4().hex)
        e = self.error(st, doc, 402, "card_error", "card_declined")
        self.assertEqual(e["decline_code"], "generic_decline")
        self.conforms("payment_intent", e["payment_intent"])
        self.assertEqual(e["payment_intent"]["status"], "requires_payment_method")
        self.assertEqual(e["payment_intent"]["last_payment_error"]["code"], "card_declined")
        # a second confirmation of the intent without a new payment method is refused
        st, doc, _ = self.call("POST", f"/v1/payment_intents/{pi['id']}/confirm", {},
                               uuid.uuid4().hex)
        self.error(st, doc, 400, "invalid_request_error", "payment_intent_unexpected_state")

    def test_3ds_cards_require_action_with_a_redirect(self):
        st, pi, _ = self.create(pm="pm_card_threeDSecure2Required", confirm="true",
                                return_url="https://shop.example/r")
        self.assertEqual(st, 200, pi)
        self.conforms("payment_intent", pi)
        self.assertEqual(pi["status"], "requires_action")
        na = pi["next_action"]
        self.assertEqual(na["type"], "redirect_to_url")
        self.assertTrue(na["redirect_to_url"]["url"].startswith("http"))
        self.assertEqual(na["redirect_to_url"]["return_url"], "https://shop.example/r")

    def test_a_succeeded_intent_is_never_charged_twice(self):
        pi = self.paid_intent()
        st, doc, _ = self.call("POST", f"/v1/payment_intents/{pi['id']}/confirm", {},
                               uuid.uuid4().hex)
        e = self.error(st, doc, 400, "invalid_request_error", "payment_intent_unexpected_state")
        self.assertEqual(e["payment_intent"]["status"], "succeeded")

    def test_idempotency_replays_and_refuses_other_parameters(self):
        key = uuid.uuid4().hex
        st, a, h1 = self.create(key=key)
        st2, b, h2 = self.create(key=key)
        self.assertEqual((st, st2, a), (200, 200, b))
        self.assertEqual(h2.get("Idempotent-Replayed"), "true")
        st, doc, _ = self.create(key=key, amount=5001)
        self.error(st, doc, 400, "idempotency_error")

    def test_bad_requests_get_stripe_errors(self):
        st, doc, _ = self.create(foo="bar")
        self.error(st, doc, 400, "invalid_request_error", "parameter_unknown", "foo")
        st, doc, _ = self.call("POST", "/v1/payment_intents", {"currency": "eur"},
                               uuid.uuid4().hex)
        self.error(st, doc, 400, "invalid_request_error", "parameter_missing", "amount")
        st, doc, _ = self.call("POST", "/v1/payment_intents", {"amount": "-3",
                                                                "currency": "eur"})
        self.error(st, doc, 400, "invalid_request_error", param="amount")
        st, doc, _ = self.call("GET", "/v1/payment_intents/pi_nope")
        self.error(st, doc, 404, "invalid_request_error", "resource_missing")
        st, doc, _ = self.call("POST", "/v1/refunds", {"payment_intent": "pi_nope"},
                               uuid.uuid4().hex)
        self.error(st, doc, 400, "invalid_request_error", "resource_missing", "payment_intent")
        # a JSON body is not a form: Stripe reads no parameters out of it
        ctx = ssl.create_default_context(cafile=os.path.join(self.S.state, "ca.pem"))
        c = http.client.HTTPSConnection("127.0.0.1", self.S.paysim_port, context=ctx,
                                        timeout=10)
        try:
            c.request("POST", "/v1/payment_intents", body='{"amount":5,"currency":"eur"}',
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            self.assertEqual(r.status, 400)
            self.assertEqual(json.loads(r.read())["error"]["type"], "invalid_request_error")
        finally:
            c.close()

    def test_partial_refunds_up_to_the_amount_then_refused(self):
        pi = self.paid_intent(amount=5000)
        refunds, keys = [], []
        for amount in (1000, 1500):
            keys.append(uuid.uuid4().hex)
            st, rf, _ = self.call("POST", "/v1/refunds",
                                  {"payment_intent": pi["id"], "amount": str(amount)}, keys[-1])
            self.assertEqual(st, 200, rf)
            self.conforms("refund", rf)
            self.assertEqual((rf["amount"], rf["payment_intent"], rf["status"]),
                             (amount, pi["id"], "succeeded"))
            refunds.append(rf)
        st, got, _ = self.call("GET", f"/v1/payment_intents/{pi['id']}?expand[]=latest_charge")
        self.assertEqual((got["latest_charge"]["amount_refunded"],
                          got["latest_charge"]["refunded"]), (2500, False))
        # more than is left: Stripe's error, nothing refunded
        st, doc, _ = self.call("POST", "/v1/refunds",
                               {"payment_intent": pi["id"], "amount": "2501"}, uuid.uuid4().hex)
        self.error(st, doc, 400, "invalid_request_error", "amount_too_large", "amount")
        # no amount: all that is left; then nothing is left
        st, rf, _ = self.call("POST", "/v1/refunds", {"payment_intent": pi["id"]},
                              uuid.uuid4().hex)
        self.assertEqual((st, rf["amount"]), (200, 2500), rf)
        st, doc, _ = self.call("POST", "/v1/refunds", {"payment_intent": pi["id"]},
                               uuid.uuid4().hex)
        self.error(st, doc, 400, "invalid_request_error", "charge_already_refunded")
        st, got, _ = self.call("GET", f"/v1/payment_intents/{pi['id']}?expand[]=latest_charge")
        self.assertEqual((got["latest_charge"]["amount_refunded"],
                          got["latest_charge"]["refunded"]), (5000, True))
        # a refund's own key replays it (nothing moves again), a new request is refused
        st, again, h = self.call("POST", "/v1/refunds",
                                 {"payment_intent": pi["id"], "amount": "1000"}, keys[0])
        self.assertEqual((st, again, h.get("Idempotent-Replayed")), (200, refunds[0], "true"))
        st, doc, _ = self.call("POST", "/v1/refunds",
                               {"payment_intent": pi["id"], "amount": "1000"})
        self.error(st, doc, 400, "invalid_request_error", "charge_already_refunded")

    def test_an_unconfirmed_intent_cannot_be_refunded(self):
        st, pi, _ = self.create()
        st, doc, _ = self.call("POST", "/v1/refunds", {"payment_intent": pi["id"]},
                               uuid.uuid4().hex)
        self.error(st, doc, 400, "invalid_request_error", "payment_intent_unexpected_state")
