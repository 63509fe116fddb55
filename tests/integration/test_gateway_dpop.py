"""Tickets bound to the key that joined (DPoP, docs/api.md): a room with "dpop" binds each
new ticket to the joining key's thumbprint; the poll that would hand out the admission
token needs a fresh proof by that key for that very request, and the token then carries
cnf.jkt. Another key's proof, no proof, a replayed or stale proof, or a proof for another
request are refused with a 401; a room without "dpop" behaves as before."""

import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest

import gwstack
import stack
from dpop_key import DPoPKey
from gwstack import ticket_number


def setUpModule():
    gwstack.module_stack("gw-dpop", gateways=1)


JWT = re.compile(r"eyJ[A-Za-z0-9_-]+\.eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{86}")


QUEUE_HTML = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "gateway",
                          "www", "queue.html")
NODE = shutil.which("node") or shutil.which("nodejs")


def page_proofs(requests):
    """Proofs for [(method, url), ...], all by one key, made by the queue page's own DPoP
    code (its dpop:begin … dpop:end block) run in node's WebCrypto."""
    with open(QUEUE_HTML) as f:
        html = f.read()
    block = "/* dpop:begin" + html.split("/* dpop:begin", 1)[1].split("/* dpop:end */", 1)[0]
    driver = ("\n(async () => { const out = [];"
              " for (const [m, u] of JSON.parse(process.argv[2]))"
              " out.push(await dpopProof('ev', m, u, 0));"
              " console.log(JSON.stringify(out)); })();\n")
    with tempfile.NamedTemporaryFile("w", suffix=".js", delete=False) as f:
        f.write(block + driver)
    try:
        p = subprocess.run([NODE, f.name, json.dumps(requests)], capture_output=True,
                           timeout=30, stdin=subprocess.DEVNULL)
    finally:
        os.unlink(f.name)
    if p.returncode != 0:
        raise AssertionError(f"node: {p.stderr.decode()[-2000:]}")
    return json.loads(p.stdout)


def claims_of(token):
    seg = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(seg + "=" * (-len(seg) % 4)))


class Binding(gwstack.GatewayTestCase):
    def url(self, path):
        return f"https://{stack.HOST}:{self.GS.g.port}{path}"

    def join_with(self, ev, key, expect=201):
        proof = key.proof("POST", self.url(f"/q/{ev}/join"))
        return self.join(ev, expect=expect, headers={"DPoP": proof})

    def poll(self, ev, ticket, key=None, proof=None):
        headers = {}
        if proof is None and key is not None:
            proof = key.proof("GET", self.url(f"/q/{ev}/status"))
        if proof is not None:
            headers["DPoP"] = proof
        return self.c.get(f"/q/{ev}/status", token=ticket, headers=headers)

    def admitted_room(self, key):
        """A bound room whose watermark, as the gateway has cached it, has passed the one
        ticket joined with key: a poll without a proof is then refused (queued polls need
        none), which costs the ticket nothing."""
        ev = self.new_room(rate_per_minute=6000, dpop=True)
        ticket = self.join_with(ev, key).json["ticket"]
        stack.wait_for(lambda: self.poll(ev, ticket).status == 401, 10,
                       what="the gateway's watermark passing the ticket")
        return ev, ticket

    def assertRefused(self, r, error, reason):
        self.assertStatus(r, 401, error)
        self.assertEqual(r.json.get("reason"), reason, repr(r))
        self.assertNotIn("admission_token", r.body.decode())

    def test_correct_proof_admits_with_cnf_jkt(self):
        k = DPoPKey()
        ev, ticket = self.admitted_room(k)
        self.assertEqual(len(ticket), 119, "a bound ticket is the version 2 layout")
        r = self.poll(ev, ticket, k)
        self.assertStatus(r, 200)
        self.assertEqual(r.json["state"], "admitted", repr(r))
        claims = claims_of(r.json["admission_token"])
        self.assertEqual(claims.get("cnf"), {"jkt": k.jkt})
        # a later poll, served from the gateway's token cache, needs a proof as well
        again = self.poll(ev, ticket, k)
        self.assertEqual(again.json["admission_token"], r.json["admission_token"])
        self.assertRefused(self.poll(ev, ticket), "proof_required", "proof_required")

    def test_another_keys_proof_is_refused(self):
        k = DPoPKey()
        ev, ticket = self.admitted_room(k)
        self.assertRefused(self.poll(ev, ticket, DPoPKey()), "invalid_proof", "wrong_key")

    def test_no_proof_refused_on_the_admitting_poll(self):
        k = DPoPKey()
        ev, ticket = self.admitted_room(k)
        self.assertRefused(self.poll(ev, ticket), "proof_required", "proof_required")
        # the ticket is still good for its owner
        self.assertEqual(self.poll(ev, ticket, k).json["state"], "admitted")

    def test_queued_polls_need_no_proof(self):
        ev = self.new_room(rate_per_minute=60, paused=True, dpop=True)
        ticket = self.join_with(ev, DPoPKey()).json["ticket"]
        r = self.poll(ev, ticket)
        self.assertStatus(r, 200)
        self.assertEqual(r.json["state"], "queued")

    def test_replayed_proof_is_refused(self):
        k = DPoPKey()
        ev, ticket = self.admitted_room(k)
        proof = k.proof("GET", self.url(f"/q/{ev}/status"))
        self.assertEqual(self.poll(ev, ticket, proof=proof).json["state"], "admitted")
        self.assertRefused(self.poll(ev, ticket, proof=proof), "invalid_proof", "replayed")

    def test_stale_proof_is_refused(self):
        k = DPoPKey()
        ev, ticket = self.admitted_room(k)
        url = self.url(f"/q/{ev}/status")
        old = k.proof("GET", url, iat=int(time.time()) - 300)
        self.assertRefused(self.poll(ev, ticket, proof=old), "invalid_proof", "stale")
        ahead = k.proof("GET", url, iat=int(time.time()) + 300)
        self.assertRefused(self.poll(ev, ticket, proof=ahead), "invalid_proof", "stale")

    def test_proof_for_another_request_is_refused(self):
        k = DPoPKey()
        ev, ticket = self.admitted_room(k)
        for method, path in (("POST", f"/q/{ev}/status"), ("GET", f"/q/{ev}/join"),
                             ("GET", f"/q/{ev}x/status")):
            p = k.proof(method, self.url(path))
            self.assertRefused(self.poll(ev, ticket, proof=p), "invalid_proof", "wrong_target")
        other_host = k.proof("GET", f"https://example.com/q/{ev}/status")
        self.assertRefused(self.poll(ev, ticket, proof=other_host), "invalid_proof",
                           "wrong_target")

    def test_forged_signature_is_refused(self):
        k = DPoPKey()
        ev, ticket = self.admitted_room(k)
        p = k.proof("GET", self.url(f"/q/{ev}/status"))
        head, body, sig = p.split(".")
        forged = f"{head}.{body}.{'A' * 86}"
        self.assertRefused(self.poll(ev, ticket, proof=forged), "invalid_proof", "bad_signature")

    def test_join_needs_a_key_and_a_well_formed_proof(self):
        ev = self.new_room(rate_per_minute=60, paused=True, dpop=True)
        self.join_with(ev, DPoPKey())  # the gateway now has the room cached
        self.assertStatus(self.join(ev, expect=None), 400, "proof_required")
        bad = self.join(ev, expect=None, headers={"DPoP": "not.a.proof"})
        self.assertStatus(bad, 400, "invalid_proof")
        k = DPoPKey()
        private = k.proof("POST", self.url(f"/q/{ev}/join"),
                          header={"typ": "dpop+jwt", "alg": "ES256",
                                  "jwk": dict(k.jwk, d="AAAA")})
        self.assertStatus(self.join(ev, expect=None, headers={"DPoP": private}), 400,
                          "invalid_proof")

    def test_binding_off_behaves_as_before(self):
        ev = self.new_room(rate_per_minute=6000, dpop=False)
        ticket = self.join(ev).json["ticket"]
        self.assertEqual(len(ticket), 98)
        r = stack.wait_for(lambda: (lambda r: r.json.get("state") == "admitted" and r)(
            self.poll(ev, ticket)), 10, what="the admission, without any proof")
        self.assertNotIn("cnf", claims_of(r.json["admission_token"]))

    def test_unbound_ticket_in_a_bound_room_is_refused(self):
        ev = self.new_room(rate_per_minute=6000, dpop=False)
        ticket = self.join(ev).json["ticket"]
        self.patch(ev, dpop=True)
        stack.wait_for(lambda: self.GS.watermark(ev) >= ticket_number(ticket), 10,
                       what="the watermark passing the ticket")
        stack.wait_for(lambda: self.poll(ev, ticket, DPoPKey()).status == 401, 5,
                       what="the gateway seeing dpop on")
        self.assertRefused(self.poll(ev, ticket, DPoPKey()), "invalid_proof", "wrong_key")

    def poll_bind(self, ev, ticket, key, bind):
        path = f"/q/{ev}/status"
        proof = key.proof("GET", self.url(path))  # htu has no query
        return self.c.get(f"{path}?bind={bind}", token=ticket, headers={"DPoP": proof})

    def test_bind_names_the_key_the_token_is_bound_to(self):
        k, shop = DPoPKey(), DPoPKey()
        ev, ticket = self.admitted_room(k)
        r = self.poll_bind(ev, ticket, k, shop.jkt)
        self.assertStatus(r, 200)
        self.assertEqual(claims_of(r.json["admission_token"]).get("cnf"), {"jkt": shop.jkt})
        # the ticket's proof still authorises the poll: another key's gets nothing
        self.assertRefused(self.poll_bind(ev, ticket, DPoPKey(), shop.jkt), "invalid_proof",
                           "wrong_key")

    def test_cached_token_is_not_served_for_another_bind(self):
        k, shop1, shop2 = DPoPKey(), DPoPKey(), DPoPKey()
        ev, ticket = self.admitted_room(k)
        t1 = self.poll_bind(ev, ticket, k, shop1.jkt).json["admission_token"]
        t2 = self.poll_bind(ev, ticket, k, shop2.jkt).json["admission_token"]
        plain = self.poll(ev, ticket, k).json["admission_token"]
        self.assertEqual(claims_of(t1)["cnf"], {"jkt": shop1.jkt})
        self.assertEqual(claims_of(t2)["cnf"], {"jkt": shop2.jkt})
        self.assertEqual(claims_of(plain)["cnf"], {"jkt": k.jkt})
        again = self.poll_bind(ev, ticket, k, shop1.jkt).json["admission_token"]
        self.assertEqual(again, t1, "the cache serves each bind its own token")
        self.assertEqual(claims_of(t1)["jti"], claims_of(t2)["jti"], "one admission")

    def test_malformed_bind_is_400(self):
        k = DPoPKey()
        ev, ticket = self.admitted_room(k)
        good = DPoPKey().jkt
        # "B" as the last character sets bits past the 256th: not a canonical encoding
        for bad in ("", "abc", good[:-1], good + "A", good[:-1] + "=", good[:-1] + "*",
                    good[:42] + "B", f"{good}&bind={good}"):
            r = self.poll_bind(ev, ticket, k, bad)
            self.assertStatus(r, 400, "invalid_bind", msg=repr(bad))
        # the ticket is still good
        self.assertStatus(self.poll_bind(ev, ticket, k, good), 200)

    def test_bind_in_a_room_without_dpop(self):
        """An unbound ticket's token can still be bound to the storefront's key."""
        shop = DPoPKey()
        ev = self.new_room(rate_per_minute=6000, dpop=False)
        ticket = self.join(ev).json["ticket"]

        def admitted():
            r = self.c.get(f"/q/{ev}/status?bind={shop.jkt}", token=ticket)
            return r.json.get("state") == "admitted" and r
        r = stack.wait_for(admitted, 10, what="the admission")
        self.assertEqual(claims_of(r.json["admission_token"]).get("cnf"), {"jkt": shop.jkt})

    def test_page_shows_the_token_only_with_a_proof(self):
        k = DPoPKey()
        ev, ticket = self.admitted_room(k)
        cookie = {"Cookie": f"onsale_q_{ev}={ticket}"}
        page = self.c.get(f"/q/{ev}", headers=cookie)
        self.assertStatus(page, 200)
        html = page.body.decode()
        self.assertIn('data-state="queued"', html)
        self.assertIsNone(JWT.search(html), "no admission token on a page without a proof")
        proof = k.proof("GET", self.url(f"/q/{ev}"))
        html = self.c.get(f"/q/{ev}?dpop={proof}", headers=cookie).body.decode()
        self.assertIn('data-state="admitted"', html)
        self.assertIsNotNone(JWT.search(html), "the admitted page carries the token")

    @unittest.skipIf(NODE is None, "node is not installed")
    def test_the_pages_own_proofs_are_accepted(self):
        """The queue page's WebCrypto code (run in node, which has the same API) makes
        proofs the gateway accepts: join, then the admitting poll, with cnf.jkt its key."""
        ev = self.new_room(rate_per_minute=6000, dpop=True)
        join_proof, poll_proof = page_proofs([["POST", self.url(f"/q/{ev}/join")],
                                              ["GET", self.url(f"/q/{ev}/status")]])
        ticket = self.join(ev, headers={"DPoP": join_proof}).json["ticket"]
        self.assertEqual(len(ticket), 119)
        stack.wait_for(lambda: self.poll(ev, ticket).status == 401, 10,
                       what="the gateway's watermark passing the ticket")
        r = self.poll(ev, ticket, proof=poll_proof)
        self.assertEqual(r.json.get("state"), "admitted", repr(r))
        seg = poll_proof.split(".")[0]
        head = json.loads(base64.urlsafe_b64decode(seg + "=" * (-len(seg) % 4)))
        k = DPoPKey()
        k.jwk = head["jwk"]
        self.assertEqual(claims_of(r.json["admission_token"])["cnf"], {"jkt": k.jkt})

    def test_settings_and_metrics(self):
        ev = self.new_room(rate_per_minute=60)
        self.assertIs(self.GS.admin("GET", f"/admin/events/{ev}").json["dpop"], False,
                      "the harness' gateways run with dpop_new_rooms = false")
        g = self.GS.add_gateway("dpop-new-rooms", dpop_new_rooms=True)
        c = g.admin_client()
        try:
            ev2 = gwstack.new_id("gw")
            r = c.request("PUT", f"/admin/events/{ev2}", body={"rate_per_minute": 60},
                          token=self.GS.S.gateway_admin_token)
            self.assertStatus(r, 201)
            self.assertIs(r.json["dpop"], True, "a new room binds by default")
        finally:
            c.close()
        k = DPoPKey()
        ev, ticket = self.admitted_room(k)

        def counts():
            st = self.GS.admin("GET", f"/admin/events/{ev}").json["stats"]
            return st["dpop_refused"], st["dpop_verified"]
        before = counts()
        self.assertRefused(self.poll(ev, ticket, DPoPKey()), "invalid_proof", "wrong_key")
        self.assertEqual(self.poll(ev, ticket, k).json["state"], "admitted")
        after = counts()
        self.assertEqual((after[0] - before[0], after[1] - before[1]), (1, 1), (before, after))
        metrics = self.a.get("/metrics").body.decode()
        refused = re.search(r"^onsale_gateway_dpop_refused_total (\d+)", metrics, re.M)
        self.assertTrue(refused and int(refused.group(1)) >= 1, metrics[:2000])
