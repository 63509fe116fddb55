"""Admission tokens bound to a key (cnf.jkt, docs/api.md "DPoP"): the reserve honours
such a token only with a DPoP proof by that key for the very request — method, the
reserve's URL, a fresh iat — whose jti it has not seen; every route the admission gate
guards asks for it. So a copied admission link does not buy on another machine. Tokens
without cnf are served as before."""

import hashlib
import time
import uuid

import stack
from dpop_key import DPoPKey


def setUpModule():
    stack.module_stack("rdpop")


SEATS = [{"id": f"A-{i}", "section": "A", "price": 1000} for i in range(1, 9)]


class BoundTokens(stack.ReserveTestCase):
    def setUp(self):
        super().setUp()
        self.ev = self.new_event(seats=SEATS, max_per_buyer=8)
        self.key = DPoPKey()
        claims = self.S.claims(self.ev, f"fan-{uuid.uuid4().hex[:8]}")
        claims["cnf"] = {"jkt": self.key.jkt}
        self.token = self.S.sign(claims)

    def url(self, path):
        return f"https://{self.c.host}:{self.c.port}{path}"

    def proof(self, method, path, key=None, **kw):
        return (key or self.key).proof(method, self.url(path), **kw)

    def send(self, method, path, body=None, proof=None, headers=None):
        h = dict(headers or {})
        if proof is not None:
            h["DPoP"] = proof
        return self.c.request(method, path, body=body, token=self.token, headers=h)

    def hold_with(self, proof, seat="A-1"):
        return self.send("POST", f"/v1/events/{self.ev}/holds", {"seats": [seat]}, proof)

    def assertRefused(self, r, error, reason):
        self.assertStatus(r, 401, error)
        self.assertEqual(r.json.get("reason"), reason, repr(r))
        self.assertIn("DPoP", r.header("www-authenticate") or "", repr(r))

    def holds_path(self):
        return f"/v1/events/{self.ev}/holds"

    def test_hold_without_a_proof_is_refused(self):
        self.assertRefused(self.hold_with(None), "proof_required", "proof_required")

    def test_proof_by_another_key_is_refused(self):
        r = self.hold_with(self.proof("POST", self.holds_path(), key=DPoPKey()))
        self.assertRefused(r, "invalid_proof", "wrong_key")

    def test_replayed_proof_is_refused(self):
        p = self.proof("POST", self.holds_path())
        self.assertStatus(self.hold_with(p, "A-1"), 201)
        self.assertRefused(self.hold_with(p, "A-2"), "invalid_proof", "replayed")

    def test_proof_for_another_request_is_refused(self):
        for method, url in (("GET", self.url(self.holds_path())),
                            ("POST", self.url(f"/v1/events/{self.ev}x/holds")),
                            ("POST", f"https://example.com{self.holds_path()}"),
                            ("POST", self.url(self.holds_path()).replace("https:", "http:"))):
            r = self.hold_with(self.key.proof(method, url))
            self.assertRefused(r, "invalid_proof", "wrong_target")

    def test_stale_proof_is_refused(self):
        for iat in (int(time.time()) - 300, int(time.time()) + 300):
            r = self.hold_with(self.proof("POST", self.holds_path(), iat=iat))
            self.assertRefused(r, "invalid_proof", "stale")

    def test_forged_signature_is_refused(self):
        head, body, _ = self.proof("POST", self.holds_path()).split(".")
        r = self.hold_with(f"{head}.{body}.{'A' * 86}")
        self.assertRefused(r, "invalid_proof", "bad_signature")

    def test_refusals_take_nothing(self):
        self.hold_with(None)
        self.hold_with(self.proof("POST", self.holds_path(), key=DPoPKey()))
        self.hold_with("not.a.proof")
        # A-1, which each of them asked for, is still free for the key's own request
        self.assertStatus(self.hold_with(self.proof("POST", self.holds_path())), 201)

    def test_right_proofs_hold_read_extend_confirm_and_read_the_checkout(self):
        h = self.hold_with(self.proof("POST", self.holds_path()))
        self.assertStatus(h, 201)
        hid = h.json["hold_id"]
        path = f"/v1/holds/{hid}"
        self.assertRefused(self.send("GET", path), "proof_required", "proof_required")
        self.assertStatus(self.send("GET", path, proof=self.proof("GET", path)), 200)
        ext = f"{path}/extend"
        self.assertRefused(self.send("POST", ext, {}, proof=self.proof("GET", ext)),
                           "invalid_proof", "wrong_target")
        self.assertStatus(self.send("POST", ext, {}, proof=self.proof("POST", ext)), 200)
        conf = f"{path}/confirm"
        body = {"payment": {"amount": h.json["amount"], "currency": "EUR",
                            "source": "tok_visa"}}
        idem = {"Idempotency-Key": uuid.uuid4().hex}
        self.assertRefused(self.send("POST", conf, body, headers=idem), "proof_required",
                           "proof_required")
        r = self.send("POST", conf, body, proof=self.proof("POST", conf), headers=idem)
        self.assertStatus(r, 201)
        self.assertEqual(r.json.get("state"), "confirmed", repr(r))
        co = f"/v1/checkouts/{r.json['checkout_id']}"
        self.assertRefused(self.send("GET", co), "proof_required", "proof_required")
        self.assertStatus(self.send("GET", co, proof=self.proof("GET", co)), 200)

    def test_release_needs_a_proof(self):
        h = self.hold_with(self.proof("POST", self.holds_path()))
        path = f"/v1/holds/{h.json['hold_id']}"
        self.assertRefused(self.send("DELETE", path), "proof_required", "proof_required")
        self.assertStatus(self.send("DELETE", path, proof=self.proof("DELETE", path)), 204)

    def test_a_gateway_record_does_not_replace_the_proof(self):
        """token_records is on: a recorded token is not signature-checked on its first
        hold, but a bound one is still asked for its proof."""
        key = f"os:{{{self.ev}}}:tk:{hashlib.sha256(self.token.encode()).hexdigest()}"
        self.S.redis("SET", key, "1", "PX", "600000")
        self.assertRefused(self.hold_with(None), "proof_required", "proof_required")
        self.assertStatus(self.hold_with(self.proof("POST", self.holds_path())), 201)

    def test_token_without_cnf_is_served_as_before(self):
        t = self.S.token(self.ev, "plain-fan")
        h = self.hold(self.ev, t, seats=["A-8"])
        self.assertStatus(self.c.get(f"/v1/holds/{h.json['hold_id']}", token=t), 200)
        # a proof on an unbound token is not looked at
        r = self.c.get(f"/v1/holds/{h.json['hold_id']}", token=t,
                       headers={"DPoP": "not.a.proof"})
        self.assertStatus(r, 200)


if __name__ == "__main__":
    import unittest
    unittest.main()
