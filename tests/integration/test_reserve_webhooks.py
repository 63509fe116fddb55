"""The payment provider's webhooks in (docs/api.md "Provider webhooks",
reserve/rsv_webhook.c): POST /v1/provider/webhook with a Stripe-Signature.

- Forged, unsigned, malformed, stale and tampered deliveries are refused 400 and store
  nothing; a signature under the older of two secrets (a rotation) is accepted.
- Every verified event is kept once by its id: a replay, and twenty deliveries of one
  event at once, act once ("duplicate" for the rest).
- An event for an open checkout makes it due for the reconciler at once: this module's
  reconciler waits an hour (reconcile_after_s) before it looks at a checkout on its own,
  so only the webhook can get a lost charge's checkout decided within seconds; two events
  racing for it move it once.
- A payment that succeeded for a checkout that had already failed moves it to refunding,
  with the event named in the audit ledger, as the ledger check does.
- An event for a settled checkout, or for a payment that is not ours, is recorded and
  changes nothing; a type the reserve does not read is answered 200 and not stored.
"""

import concurrent.futures
import hashlib
import hmac
import json
import os
import tempfile
import time
import uuid

import stack
from stack import metric_sum, wait_for
from test_saga_flows import SagaCase, SagaStack

SECRET_NEW = "whsec_new_" + os.urandom(12).hex()
SECRET_OLD = "whsec_old_" + os.urandom(12).hex()
PATH = "/v1/provider/webhook"

_dir = None


class WebhookStack(SagaStack):
    """The saga stack with the webhook secrets, and a reconciler that never looks at a
    checkout on its own within a test: only a webhook moves an open checkout."""

    def __init__(self, name, secrets):
        super().__init__(name)
        self.secrets = secrets

    def env(self):
        e = super().env()
        e.update({
            "ONSALE_RESERVE_PAY_WEBHOOK_SECRETS_FILE": self.secrets,
            # only this module's deliveries: the simulator's own webhooks stay off
            "ONSALE_PAYSIM_WEBHOOK_URL": "",
            "ONSALE_RESERVE_PAY_WEBHOOK_TOLERANCE_S": "300",
            "ONSALE_RESERVE_RECONCILE_AFTER_S": "3600",
        })
        return e


def setUpModule():
    global _dir
    _dir = tempfile.mkdtemp(prefix="onsale-webhooks-")
    secrets = os.path.join(_dir, "webhook-secrets")
    with open(secrets, "w") as f:
        f.write(f"{SECRET_NEW}\n{SECRET_OLD}\n")
    os.chmod(secrets, 0o600)
    stack.module_own_stack(WebhookStack("webhooks", secrets))


def tearDownModule():
    if _dir:
        for f in os.listdir(_dir):
            os.unlink(os.path.join(_dir, f))
        os.rmdir(_dir)


def sign(body, secret=SECRET_NEW, t=None):
    t = int(time.time()) if t is None else t
    mac = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"


def event(type_, obj, eid=None):
    return {"id": eid or "evt_" + uuid.uuid4().hex, "object": "event", "type": type_,
            "created": int(time.time()), "livemode": False, "data": {"object": obj}}


def intent(pid, checkout=None, status="succeeded"):
    return {"id": pid, "object": "payment_intent", "status": status, "amount": 1000,
            "currency": "eur", "metadata": {"checkout": checkout} if checkout else {}}


SEATS = [{"id": f"A-{i}", "section": "A", "price": 1000} for i in range(1, 31)]


class Webhooks(SagaCase):
    def deliver(self, doc=None, raw=None, signature="sign", secret=SECRET_NEW, t=None,
                client=None):
        body = raw if raw is not None else json.dumps(doc).encode()
        headers = {"Content-Type": "application/json"}
        if signature == "sign":
            headers["Stripe-Signature"] = sign(body, secret, t)
        elif signature is not None:
            headers["Stripe-Signature"] = signature
        return (client or self.c).request("POST", PATH, raw=body, headers=headers)

    def stored(self, eid):
        return self.S.sql_value(f"select count(*) from provider_events where event_id = '{eid}'")

    def outcome(self, eid):
        return self.S.sql_value(f"select outcome from provider_events where event_id = '{eid}'")

    # -- refused ---------------------------------------------------------------------

    def test_unsigned_forged_stale_and_tampered_are_refused(self):
        doc = event("payment_intent.succeeded", intent("pi_forged", "co_nothing"))
        body = json.dumps(doc).encode()
        r = self.deliver(doc, signature=None)
        self.assertStatus(r, 400, "signature_missing")
        r = self.deliver(doc, secret="whsec_guessed_" + "0" * 20)
        self.assertStatus(r, 400, "signature_invalid")
        self.assertIn("mismatch", r.json["message"])
        r = self.deliver(doc, t=int(time.time()) - 3600)  # a replay of an old delivery
        self.assertStatus(r, 400, "signature_invalid")
        self.assertIn("stale", r.json["message"])
        r = self.deliver(doc, signature="t=abc,v1=zz")
        self.assertStatus(r, 400, "signature_invalid")
        # signed, then the body changed on the way
        sig = sign(body)
        tampered = body.replace(b"pi_forged", b"pi_fOrged")
        r = self.c.request("POST", PATH, raw=tampered,
                           headers={"Content-Type": "application/json", "Stripe-Signature": sig})
        self.assertStatus(r, 400, "signature_invalid")
        self.assertEqual(self.stored(doc["id"]), "0")
        self.assertGreaterEqual(metric_sum(self.S.metrics(),
                                           "onsale_reserve_provider_webhooks_total",
                                           outcome="refused"), 5)

    def test_signed_garbage_is_a_clear_400(self):
        for raw in (b"not json", b"[]", b'{"id":"evt_x"}',
                    json.dumps({"id": "evt_y", "type": "payment_intent.succeeded"}).encode(),
                    json.dumps({"id": "evt_z", "type": "charge.refunded",
                                "data": {"object": {"id": 7}}}).encode()):
            r = self.deliver(raw=raw)
            self.assertStatus(r, 400, "invalid_request", msg=raw)
        self.assertEqual(self.S.sql_value("select count(*) from provider_events where "
                                          "event_id in ('evt_x', 'evt_y', 'evt_z')"), "0")
        r = self.c.request("GET", PATH)
        self.assertStatus(r, 405, "method_not_allowed")

    # -- recorded once -----------------------------------------------------------------

    def test_old_secret_verifies_and_a_replay_is_a_no_op(self):
        doc = event("payment_intent.succeeded", intent("pi_not_ours_" + uuid.uuid4().hex[:8]))
        r = self.deliver(doc, secret=SECRET_OLD)
        self.assertStatus(r, 200)
        self.assertEqual(r.json, {"received": True, "id": doc["id"], "outcome": "not_ours"})
        r = self.deliver(doc)  # the provider retries the same event
        self.assertStatus(r, 200)
        self.assertEqual(r.json["outcome"], "duplicate")
        self.assertEqual(self.stored(doc["id"]), "1")
        self.assertEqual(self.outcome(doc["id"]), "not_ours")

    def test_twenty_deliveries_of_one_event_at_once_act_once(self):
        doc = event("payment_intent.payment_failed", intent("pi_burst_" + uuid.uuid4().hex[:8]))
        body = json.dumps(doc).encode()

        def one(_):
            c = self.S.client()
            try:
                return self.deliver(raw=body, client=c).json["outcome"]
            finally:
                c.close()
        with concurrent.futures.ThreadPoolExecutor(20) as pool:
            outcomes = list(pool.map(one, range(20)))
        self.assertEqual(sorted(set(outcomes)), ["duplicate", "not_ours"], outcomes)
        self.assertEqual(outcomes.count("not_ours"), 1, outcomes)
        self.assertEqual(self.stored(doc["id"]), "1")

    def test_types_not_read_are_acknowledged_and_not_stored(self):
        doc = event("customer.created", {"id": "cus_1", "object": "customer"})
        r = self.deliver(doc)
        self.assertStatus(r, 200)
        self.assertEqual(r.json["outcome"], "ignored")
        self.assertEqual(self.stored(doc["id"]), "0")

    # -- acting through the saga ---------------------------------------------------------

    def lost_checkout(self, ev, buyer, seat):
        """A confirm whose charge is never answered: the checkout waits, open, for a
        reconciler that would not look for an hour."""
        t = self.S.token(ev, buyer)
        h = self.hold(ev, t, seats=[seat]).json
        r = self.confirm_src(h, t, "tok_sim_lost")
        self.assertStatus(r, 202)
        cid = r.json["checkout_id"]
        wait_for(lambda: self.checkout_state(cid) == "unknown", 30, interval=0.2,
                 what=f"checkout {cid} unknown")
        wait_for(lambda: self.S.sql_value(
            f"select coalesce(lease_until < now(), true) from checkouts "
            f"where checkout_id = '{cid}'") == "t", 30, interval=0.2, what="lease lapsed")
        return cid

    def test_an_event_gets_an_open_checkout_decided_in_seconds_and_a_race_moves_it_once(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        cid = self.lost_checkout(ev, "hook-nudge", "A-1")
        time.sleep(1)  # several reconciler ticks: nothing happens on its own
        self.assertEqual(self.checkout_state(cid), "unknown")
        docs = [event("payment_intent.payment_failed", intent("pi_lost", cid, "requires_payment_method"))
                for _ in range(2)]

        def one(doc):
            c = self.S.client()
            try:
                return self.deliver(doc, client=c).json["outcome"]
            finally:
                c.close()
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            outcomes = list(pool.map(one, docs))
        self.assertIn("nudged", outcomes)
        # the reconciler looks the charge up (the provider has none) and releases it
        wait_for(lambda: self.checkout_state(cid) == "released", 15, interval=0.1,
                 what=f"checkout {cid} released after the webhook")
        moves = [t for t in self.transitions(cid) if t[1] == "released"]
        self.assertEqual(moves, [("unknown", "released")])
        self.assertEqual(self.S.sql_value(
            f"select nudged_at is null from checkouts where checkout_id = '{cid}'"), "t")
        # a late event for the now settled checkout changes nothing
        late = event("payment_intent.payment_failed", intent("pi_lost", cid, "canceled"))
        self.assertEqual(self.deliver(late).json["outcome"], "settled")
        self.assertEqual(self.checkout_state(cid), "released")

    def test_success_for_a_failed_checkout_moves_it_to_refunding(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        t = self.S.token(ev, "hook-late")
        h = self.hold(ev, t, seats=["A-2"]).json
        r = self.confirm_src(h, t, "tok_chargeDeclined")
        self.assertStatus(r, 402)
        cid = r.json["checkout_id"]
        wait_for(lambda: self.checkout_state(cid) == "failed", 15, interval=0.1,
                 what=f"checkout {cid} failed")
        doc = event("payment_intent.succeeded", intent("pi_late_" + uuid.uuid4().hex[:8], cid))
        r = self.deliver(doc)
        self.assertStatus(r, 200)
        self.assertEqual(r.json["outcome"], "refunding")
        tr = self.transitions(cid)
        self.assertIn(("failed", "refunding"), tr)
        why = self.S.sql_value(
            f"select reason from checkout_transitions where checkout_id = '{cid}' "
            f"and to_state = 'refunding'")
        self.assertIn(doc["id"], why, "the audit ledger names the event")
        self.assertEqual(self.S.sql_value(
            f"select charge_id from checkouts where checkout_id = '{cid}'"),
            doc["data"]["object"]["id"])
        # the same payment announced again: already refunding, nothing more
        again = event("payment_intent.succeeded", doc["data"]["object"])
        self.assertIn(self.deliver(again).json["outcome"], ("nudged", "settled"))
        self.assertEqual([t for t in self.transitions(cid) if t[1] == "refunding"],
                         [("failed", "refunding")])
