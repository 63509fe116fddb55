"""Proof of work on join (docs/api.md "Proof of work", docs/design.md "Bot defences").

A room with pow on places a fan only with a solved challenge: a join without one gets 428
with a challenge, a malformed, forged (another room or network), expired or unsolved
proof a clear 4xx with a new challenge each, and a proof places at most one fan even when
replayed on another gateway. The difficulty rises under a bounded flood of challenges
from one address block and falls back once it stops. A room with pow off joins as
before, and new rooms get pow on by default (pow_new_rooms)."""

import base64
import hashlib
import hmac
import itertools
import os
import struct
import time

import gwstack
import stack

BASE = 6  # cheap for the tests; the check costs the same at any difficulty
WINDOW_S = 2  # the rates' time constant: the fall back takes seconds, not minutes
BLOCK_FREE = 600  # per minute: 20 per 2 s window; the probes below stay far under it


def setUpModule():
    gwstack.module_stack("gw-pow", gateways=2, conf={
        "pow_new_rooms": "true", "pow_base_bits": BASE, "pow_max_bits": 20,
        "pow_window_s": WINDOW_S, "pow_block_free_per_min": BLOCK_FREE,
        "pow_total_free_per_min": 0,
    })


def b64url(raw):
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


zero_bits = stack.pow_example.leading_zero_bits
solve = stack.pow_example.solve


def proof_of(ch):
    return f"{ch['challenge']}.{solve(ch['challenge'], ch['difficulty'])}"


class PowTest(gwstack.GatewayTestCase):

    def challenge(self, ev, client=None):
        r = (client or self.c).get(f"/q/{ev}/challenge")
        self.assertStatus(r, 200)
        self.assertEqual(r.json["algorithm"], "sha256-leading-zero-bits")
        self.assertEqual(r.header("cache-control"), "no-store")
        return r.json

    def join_pow(self, ev, proof, client=None, expect=201):
        return self.join(ev, client=client, expect=expect, headers={"Onsale-Pow": proof})

    def pow_key(self):
        with open(self.GS.secret_path, "rb") as f:
            secret = f.read().strip()
        return hmac.new(secret, b"onsale proof-of-work challenge key v1", hashlib.sha256).digest()

    def made_challenge(self, ev, bits, expires, block="4:127.0.0", version=2):
        """A challenge with our own MAC (the key derives from the ticket secret): version 2
        is issuer(8) and serial(4) after the expiry, version 1 (before serials) 12 random
        bytes there."""
        tail = os.urandom(8) + struct.pack(">I", 7) if version == 2 else os.urandom(12)
        head = bytes([version, bits]) + struct.pack(">I", expires) + tail
        mac = hmac.new(self.pow_key(), head + ev.encode() + b"\0" + block.encode(),
                       hashlib.sha256).digest()[:16]
        return b64url(head + mac)

    def test_join_without_proof_gets_428_with_a_challenge(self):
        ev = self.new_room(prefix="pw", rate_per_minute=60)
        self.assertTrue(self.GS.admin("GET", f"/admin/events/{ev}").json["pow"])
        r = self.join(ev, expect=428)
        self.assertStatus(r, 428, "pow_required")
        ch = r.json["pow"]
        self.assertEqual(len(ch["challenge"]), 46)
        self.assertGreaterEqual(ch["difficulty"], BASE)
        self.assertGreater(ch["expires_in_seconds"], 0)
        j = self.join_pow(ev, proof_of(ch))
        self.assertEqual(j.json["state"], "queued")
        self.assertEqual(self.status(ev, j.json["ticket"]).status, 200)

    def test_each_bad_proof_is_refused_with_its_reason(self):
        ev = self.new_room(prefix="pw", rate_per_minute=60)
        other = self.new_room(prefix="pw", rate_per_minute=60)
        ch = self.challenge(ev)
        good = proof_of(ch)
        cases = [
            ("malformed", "not-a-proof", 400, "pow_malformed"),
            ("bad nonce", f"{ch['challenge']}.{self.unsolving(ch['challenge'], ch['difficulty'])}",
             403, "pow_insufficient"),
            ("another room's", proof_of(self.challenge(other)), 403, "pow_invalid"),
            ("forged difficulty", self.lowered(ch["challenge"]), 403, "pow_invalid"),
            ("another network's", self.solved(self.made_challenge(
                ev, BASE, int(time.time()) + 60, block="4:10.1.2"), BASE), 403, "pow_invalid"),
            ("expired", self.solved(self.made_challenge(ev, BASE, int(time.time()) - 1), BASE),
             403, "pow_expired"),
            # a challenge of the format before serials, solved: the client fetches anew
            ("version 1", self.solved(self.made_challenge(
                ev, BASE, int(time.time()) + 60, version=1), BASE), 400, "pow_malformed"),
        ]
        for what, proof, code, error in cases:
            with self.subTest(what):
                r = self.join_pow(ev, proof, expect=None)
                self.assertStatus(r, code, error, msg=what)
                self.assertIn("challenge", r.json["pow"], what)
        self.assertEqual(self.GS.room_state(ev).get("n") in (None, "0"), True,
                         "a refused proof took a place")
        self.join_pow(ev, good)  # the good one still works after the refusals

    def unsolving(self, challenge, bits):
        for i in itertools.count():
            d = hashlib.sha256((challenge + str(i)).encode()).digest()
            if zero_bits(d) < bits:
                return str(i)

    def lowered(self, challenge):
        raw = bytearray(base64.urlsafe_b64decode(challenge + "=="))
        raw[1] = 0
        c = b64url(bytes(raw))
        return f"{c}.{solve(c, 0)}"

    def solved(self, challenge, bits):
        return f"{challenge}.{solve(challenge, bits)}"

    def test_a_replayed_proof_places_no_second_fan(self):
        ev = self.new_room(prefix="pw", rate_per_minute=60)
        proof = proof_of(self.challenge(ev))
        first = self.join_pow(ev, proof)
        self.assertEqual(first.json["state"], "queued")
        for g in self.GS.gateways:  # the same gateway, and another one
            c = g.client()
            try:
                r = self.join_pow(ev, proof, client=c, expect=None)
            finally:
                c.close()
            self.assertStatus(r, 409, "pow_replayed", msg=g.name)
            self.assertIn("challenge", r.json["pow"])
        self.assertEqual(int(self.GS.redis("GET", f"os:{{{ev}}}:q:n")), 1)
        # the used-mark is the serial's bit in the bitmap of its expiry bucket (64 s) and
        # issuer, which outlives the challenge by less than a bucket
        raw = base64.urlsafe_b64decode(proof.split(".")[0] + "==")
        self.assertEqual(raw[0], 2)
        expires = struct.unpack(">I", raw[2:6])[0]
        serial = struct.unpack(">I", raw[14:18])[0]
        key = f"os:{{{ev}}}:q:pw:{expires // 64}:{raw[6:14].hex()}"
        self.assertEqual(int(self.GS.redis("GETBIT", key, serial)), 1)
        self.assertEqual(int(self.GS.redis("BITCOUNT", key)), 1)
        ttl = int(self.GS.redis("TTL", key))
        left = (expires // 64 + 1) * 64 - int(time.time())
        self.assertTrue(expires - int(time.time()) - 2 <= ttl <= left + 2, (ttl, left))

    def test_difficulty_rises_under_a_flood_from_one_block_and_falls_back(self):
        ev = self.new_room(prefix="pw", rate_per_minute=60)
        seen = [self.challenge(ev)["difficulty"] for _ in range(300)]  # bounded: 300
        self.assertGreaterEqual(max(seen), BASE + 2, seen[-5:])
        self.assertGreater(seen[-1], seen[0])
        m = self.GS.admin("GET", f"/admin/events/{ev}").json
        self.assertEqual(m["stats"]["pow"]["base_bits"], BASE)
        # the flood stops: the block's difficulty decays back to the base (bounded poll;
        # each probe is one more challenge, well under the free rate)
        stack.wait_for(lambda: self.probe(ev) == BASE, timeout=20 * WINDOW_S,
                       what="the difficulty back at base")

    def probe(self, ev):
        time.sleep(0.5)  # 2 probes per second, 120 per minute: a fifth of BLOCK_FREE
        return self.challenge(ev)["difficulty"]

    def test_room_with_pow_off_joins_as_before(self):
        ev = self.new_room(prefix="pw", rate_per_minute=60, pow=False)
        self.assertFalse(self.GS.admin("GET", f"/admin/events/{ev}").json["pow"])
        j = self.join(ev)
        self.assertEqual(j.json["state"], "queued")
        # switched on by PATCH: new joins need a proof, the ticket holder keeps the place
        self.patch(ev, pow=True)
        self.assertStatus(self.join(ev, expect=None), 428, "pow_required")
        self.assertEqual(self.join(ev, headers={"Authorization": "Bearer " + j.json["ticket"]},
                                   expect=200).json["ticket"], j.json["ticket"])

    def test_proven_joins_are_not_charged_to_the_address_bucket(self):
        """Fans behind one CGNAT address each pay a proof: the per-address bucket, which
        would 429 the third join without one, leaves proven joins alone."""
        g = self.GS.add_gateway(gwstack.new_id("pwlim"), join_rate_per_ip=6, join_burst_per_ip=2)
        try:
            ev = self.new_room(prefix="pw", rate_per_minute=1, paused=True)
            c = g.client()
            try:
                for _ in range(4):
                    self.join_pow(ev, proof_of(self.challenge(ev, client=c)), client=c)
                off = self.new_room(prefix="pw", rate_per_minute=1, paused=True, pow=False)
                codes = [c.post(f"/q/{off}/join").status for _ in range(3)]
                self.assertEqual(codes, [201, 201, 429], "a room without proofs is limited")
            finally:
                c.close()
        finally:
            g.stop()
            self.GS.gateways.remove(g)

    def test_refused_proofs_are_counted(self):
        ev = self.new_room(prefix="pw", rate_per_minute=60)
        before = self.refused()
        for _ in range(3):
            self.join(ev, expect=428)
        self.assertGreaterEqual(self.refused() - before, 3)
        m = self.GS.admin("GET", "/metrics")
        self.assertIn("onsale_gateway_pow_refused_total", m.body.decode())

    def refused(self):
        total = 0
        for g in self.GS.gateways:
            ev = self.GS.admin("GET", "/admin/events", gw=g).json
            rooms = ev.get("events") or ev.get("rooms") or []
            if rooms:
                total += rooms[0]["stats"]["pow"]["refused"]
        return total

    def test_page_solves_in_a_worker_and_without_javascript_says_so(self):
        ev = self.new_room(prefix="pw", rate_per_minute=60)
        page = self.c.get(f"/q/{ev}")
        self.assertEqual(page.status, 200)
        self.assertIn('data-pow="1"', page.body.decode())
        self.assertIn("worker-src 'self'", page.header("content-security-policy"))
        # the page comes with a challenge for its script: solved, it places the fan
        html = page.body.decode()
        c = html.split('data-pow-challenge="', 1)[1].split('"', 1)[0]
        bits = int(html.split('data-pow-bits="', 1)[1].split('"', 1)[0])
        self.assertEqual(len(c), 46)
        self.join_pow(ev, f"{c}.{solve(c, bits)}")
        w = self.c.get(f"/q/{ev}/pow.js")
        self.assertEqual(w.status, 200)
        self.assertTrue(w.header("content-type").startswith("text/javascript"))
        self.assertEqual(w.header("content-security-policy"), "default-src 'none'")
        self.assertIn("self.onmessage", w.body.decode())
        # the no-JS form cannot solve a challenge: a clear page, no place taken
        r = self.c.post(f"/q/{ev}/join", raw=b"",
                        headers={"Content-Type": "application/x-www-form-urlencoded"})
        self.assertEqual(r.status, 428)
        self.assertIn("needs JavaScript", r.body.decode())
        self.assertIsNone(r.header("set-cookie"))
        # a room with pow off keeps its no-JS form
        off = self.new_room(prefix="pw", rate_per_minute=60, pow=False)
        self.assertIn('data-pow="0"', self.c.get(f"/q/{off}").body.decode())
        r = self.c.post(f"/q/{off}/join", raw=b"",
                        headers={"Content-Type": "application/x-www-form-urlencoded"})
        self.assertEqual(r.status, 303)
