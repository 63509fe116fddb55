"""Presale codes (docs/api.md "Presale codes", docs/design.md "Presale codes"): issued in
batches for a phase, exported as CSV, redeemed by the join that takes the place, with
real Redis and two gateways. One code never places more fans than its uses, whatever
the race; a replay by the fan holding the place is the same place; revoked, used-up,
unknown, malformed and wrong-phase codes each get their own 4xx; a requires_code phase
admits only the fans whose code was for it; guessing is limited per address block and
per gateway."""

import concurrent.futures
import csv
import io
import time

import gwstack
from gwstack import rfc3339, ticket_number


def setUpModule():
    gwstack.module_stack("gw-codes", gateways=2, conf={"code_tries_per_block": 100000})


def phase(name, at, rate, **kw):
    return dict(name=name, starts_at=rfc3339(at), rate_per_minute=rate, **kw)


class CodeHelpers(gwstack.GatewayTestCase):
    """Rooms with a presale phase, their codes, joins with a code (no tests of its own)."""

    def presale_room(self, **kw):
        t = time.time()
        phases = kw.pop("phases", [phase("presale", t - 60, 6000, requires_code=True),
                                   phase("general", t + 3600, 6000)])
        return self.new_room(rate_per_minute=6000, phases=phases, **kw)

    def issue(self, ev, phase_name="presale", count=10, uses=1, expect=201):
        r = self.GS.admin("POST", f"/admin/events/{ev}/codes",
                          {"phase": phase_name, "count": count, "uses": uses})
        self.assertStatus(r, expect, msg="issue:")
        return r.json

    def export(self, ev, batch, **q):
        qs = "&".join(f"{k}={v}" for k, v in q.items())
        r = self.GS.admin("GET", f"/admin/events/{ev}/codes/{batch}.csv" + (f"?{qs}" if qs else ""))
        return r

    def codes(self, ev, batch, n=None):
        r = self.export(ev, batch, **({"limit": n} if n else {}))
        self.assertStatus(r, 200, msg="export:")
        return [row["code"] for row in csv.DictReader(io.StringIO(r.body.decode()))]

    def join_code(self, ev, code, client=None, **kw):
        return (client or self.c).post(f"/q/{ev}/join", headers={"Onsale-Code": code}, **kw)


class Codes(CodeHelpers):
    def test_issue_export_and_list(self):
        ev = self.presale_room()
        b = self.issue(ev, count=1_500_000, uses=2)  # cheap: nothing per code is stored
        self.assertEqual((b["batch"], b["count"], b["uses"]), (1, 1_500_000, 2))
        r = self.export(ev, 1, limit=5)
        self.assertStatus(r, 200)
        self.assertTrue(r.headers["content-type"].startswith("text/csv"))
        rows = list(csv.DictReader(io.StringIO(r.body.decode())))
        self.assertEqual([int(x["serial"]) for x in rows], [0, 1, 2, 3, 4])
        self.assertTrue(all(len(x["code"]) == 20 and x["phase"] == "presale" and
                            x["uses"] == "2" for x in rows), rows)
        self.assertIn("from=5&limit=5", r.headers["link"])
        self.assertEqual(r.headers["onsale-codes-total"], "1500000")
        # the last page has no next link; both gateways derive the same codes
        last = self.export(ev, 1, **{"from": 1_499_998})
        self.assertStatus(last, 200)
        self.assertNotIn("link", last.headers)
        self.assertEqual(len(last.body.decode().strip().split("\r\n")), 3)
        other = self.GS.admin("GET", f"/admin/events/{ev}/codes/1.csv?limit=5",
                              gw=self.GS.gateways[1])
        self.assertEqual(other.body, r.body)
        listed = self.GS.admin("GET", f"/admin/events/{ev}/codes").json["batches"]
        self.assertEqual(listed, [{"batch": 1, "phase": "presale", "count": 1500000, "uses": 2,
                                   "revoked": False}])
        # bad requests
        for body in [{"count": 5}, {"phase": "presale", "count": 0},
                     {"phase": "presale", "count": 2_000_001},
                     {"phase": "presale", "count": 5, "uses": 256}]:
            r = self.GS.admin("POST", f"/admin/events/{ev}/codes", body)
            self.assertStatus(r, 400, "invalid_request", msg=repr(body))
        r = self.GS.admin("POST", f"/admin/events/{ev}/codes", {"phase": "nope", "count": 5})
        self.assertStatus(r, 409, "unknown_phase")
        self.assertStatus(self.export(ev, 1, limit=5001), 400, "invalid_request")
        self.assertStatus(self.export(ev, 9), 404, "unknown_batch")
        self.assertStatus(self.GS.admin("GET", f"/admin/events/{ev}/codes/x.csv"), 400,
                          "invalid_request")

    def test_a_code_places_and_admits_its_fan(self):
        ev = self.presale_room()
        self.issue(ev, count=3)
        code = self.codes(ev, 1)[0]
        self.assertStatus(self.join(ev, expect=None), 403, "code_required")
        r = self.join_code(ev, code.lower().replace("-", " "))  # as a fan may type it
        self.assertStatus(r, 201)
        ticket = r.json["ticket"]
        deadline = time.time() + 10
        while time.time() < deadline:
            s = self.status(ev, ticket)
            if s.json.get("state") == "admitted":
                break
            time.sleep(0.3)
        self.assertEqual(s.json.get("state"), "admitted", repr(s))
        # a replay by the fan holding the place: the same place, no use spent
        again = self.join_code(ev, code, token=ticket)
        self.assertIn(again.status, (200, 201), repr(again))
        self.assertEqual(ticket_number(again.json["ticket"]), ticket_number(ticket))
        # the single use is gone for anyone else
        self.assertStatus(self.join_code(ev, code), 409, "code_used_up")

    def test_one_code_places_at_most_its_uses_across_two_gateways(self):
        ev = self.presale_room()
        self.issue(ev, count=2, uses=3)
        code = self.codes(ev, 1)[0]
        gws = self.GS.gateways
        per = [[g.req("POST", f"/q/{ev}/join", headers={"Onsale-Code": code})
                for _ in range(30)] for g in gws]
        with concurrent.futures.ThreadPoolExecutor(2) as ex:
            results = [r for rs in ex.map(lambda p: p[0].burst(p[1]), zip(gws, per)) for r in rs]
        placed = [r for r in results if r.status == 201]
        refused = [r for r in results if r.status != 201]
        self.assertEqual(len(placed), 3, [r.status for r in results])
        self.assertTrue(all(r.status == 409 and r.json["error"] == "code_used_up"
                            for r in refused), [repr(r) for r in refused[:3]])
        self.assertEqual(len({ticket_number(r.json["ticket"]) for r in placed}), 3)
        # the other code of the batch is untouched
        self.assertStatus(self.join_code(ev, self.codes(ev, 1)[1]), 201)

    def test_each_bad_code_has_its_own_error(self):
        t = time.time()
        ev = self.presale_room(phases=[phase("presale", t - 60, 6000, requires_code=True),
                                       phase("later", t + 3600, 6000, requires_code=True)])
        self.issue(ev, count=4)
        self.issue(ev, "later", count=2)
        mine = self.codes(ev, 1)
        other = self.presale_room()
        self.issue(other, count=1)
        foreign = self.codes(other, 1)[0]
        # malformed: a typo (the check character), wrong length, junk, far too long
        typo = mine[0][:-1] + ("0" if mine[0][-1] != "0" else "1")
        for bad in [typo, mine[0][:-2], "hello", "A" * 65]:
            self.assertStatus(self.join_code(ev, bad), 400, "code_malformed", msg=bad)
        # unknown: another room's code (its MAC is not this room's)
        self.assertStatus(self.join_code(ev, foreign), 403, "code_unknown")
        # wrong phase: a code for a phase not in force
        self.assertStatus(self.join_code(ev, self.codes(ev, 2)[0]), 409, "code_wrong_phase")
        # revoked, one by one and as a batch
        r = self.GS.admin("POST", f"/admin/events/{ev}/codes/revoke",
                          {"codes": [mine[1], foreign, "junk"]})
        self.assertStatus(r, 200)
        self.assertEqual((r.json["revoked"], r.json["unknown"]), (1, 2))
        self.assertStatus(self.join_code(ev, mine[1]), 403, "code_revoked")
        self.assertStatus(self.join_code(ev, mine[2]), 201)
        r = self.GS.admin("POST", f"/admin/events/{ev}/codes/revoke", {"batches": [1]},
                          gw=self.GS.gateways[1])
        self.assertStatus(r, 200)
        self.assertStatus(self.join_code(ev, mine[3]), 403, "code_revoked")
        for body in [{}, {"codes": "x"}, {"batches": [0]}, {"codes": ["a"] * 1001}]:
            r = self.GS.admin("POST", f"/admin/events/{ev}/codes/revoke", body)
            self.assertStatus(r, 400, "invalid_request", msg=repr(body)[:60])
        # nothing above was a 500, and the room still takes a good code of a new batch
        self.assertStatus(self.join_code(ev, mine[0]), 403, "code_revoked")
        self.assertEqual(self.issue(ev, count=1)["batch"], 3)
        self.assertStatus(self.join_code(ev, self.codes(ev, 3)[0]), 201)
        # every outcome is counted (one gateway's /metrics: these joins all went to it)
        metrics = self.a.get("/metrics").body.decode()
        for outcome in ("placed", "malformed", "unknown", "revoked", "wrong_phase"):
            line = next((ln for ln in metrics.splitlines() if ln.startswith(
                f'onsale_gateway_codes_total{{outcome="{outcome}"}}')), None)
            self.assertIsNotNone(line, outcome)
            self.assertGreaterEqual(float(line.split()[-1]), 1, line)

    def test_a_code_phase_admits_only_its_holders(self):
        t = time.time()
        switch, general = t + 4, t + 12
        ev = self.new_room(rate_per_minute=6000, paused=True, phases=[
            phase("early", t - 60, 6000), phase("presale", switch, 6000, requires_code=True),
            phase("general", general, 6000)])
        early = self.join(ev).json["ticket"]  # placed in a phase without codes
        self.issue(ev, count=1)
        code = self.codes(ev, 1)[0]
        while time.time() < switch + 0.5:
            time.sleep(0.2)
        self.patch(ev, paused=False)
        coded = self.join_code(ev, code)
        self.assertStatus(coded, 201)
        got = {}
        while time.time() < general - 1:
            for name, tk in (("early", early), ("coded", coded.json["ticket"])):
                s = self.status(ev, tk)
                self.assertIn(s.status, (200,), repr(s))
                if s.json["state"] == "admitted" and name not in got:
                    got[name] = time.time()
            time.sleep(0.3)
        self.assertIn("coded", got)
        self.assertNotIn("early", got, "a fan without a code was admitted in the presale")
        deadline = general + 8
        while time.time() < deadline and "early" not in got:
            if self.status(ev, early).json["state"] == "admitted":
                got["early"] = time.time()
            time.sleep(0.3)
        self.assertIn("early", got, "the general phase did not admit the early fan")
        self.assertGreaterEqual(got["early"], general - 0.5)


class CodesWithProofOfWork(CodeHelpers):
    """A room with pow on: a join carries its proof and its code; the code's keys come
    before the proof's in join.lua's KEYS, and a replayed proof spends no use."""

    def test_a_code_and_a_proof_together(self):
        import stack
        ev = self.presale_room(pow=True)
        self.issue(ev, count=2)
        codes = self.codes(ev, 1)

        def proof():
            ch = self.c.get(f"/q/{ev}/challenge").json
            return f"{ch['challenge']}.{stack.pow_example.solve(ch['challenge'], ch['difficulty'])}"

        self.assertStatus(self.join_code(ev, codes[0]), 428, "pow_required")
        p = proof()
        r = self.c.post(f"/q/{ev}/join", headers={"Onsale-Code": codes[0], "Onsale-Pow": p})
        self.assertStatus(r, 201)
        again = self.c.post(f"/q/{ev}/join", headers={"Onsale-Code": codes[1], "Onsale-Pow": p})
        self.assertStatus(again, 409, "pow_replayed")
        # the replayed proof took no use of the second code
        r = self.c.post(f"/q/{ev}/join", headers={"Onsale-Code": codes[1], "Onsale-Pow": proof()})
        self.assertStatus(r, 201)
        self.assertStatus(self.c.post(f"/q/{ev}/join", headers={
            "Onsale-Code": codes[1], "Onsale-Pow": proof()}), 409, "code_used_up")


class Guessing(gwstack.GatewayTestCase):
    def test_tries_per_block_and_failures_per_gateway_are_limited(self):
        g = self.GS.add_gateway("tight", code_tries_per_block=5, code_failures_per_min=1000)
        self.addCleanup(g.stop)
        t = time.time()
        ev = self.new_room(rate_per_minute=60, phases=[
            phase("presale", t - 60, 60, requires_code=True)])
        c = g.client()
        self.addCleanup(c.close)
        statuses = [c.post(f"/q/{ev}/join", headers={"Onsale-Code": "hello"}).status
                    for _ in range(7)]
        self.assertEqual(statuses[:5], [400] * 5)
        r = c.post(f"/q/{ev}/join", headers={"Onsale-Code": "hello"})
        self.assertStatus(r, 429, "rate_limited")
        self.assertIn("retry-after", r.headers)

        g2 = self.GS.add_gateway("few", code_tries_per_block=100000, code_failures_per_min=3)
        self.addCleanup(g2.stop)
        c2 = g2.client()
        self.addCleanup(c2.close)
        statuses = [c2.post(f"/q/{ev}/join", headers={"Onsale-Code": "hello"}).status
                    for _ in range(6)]
        self.assertEqual(statuses[:3], [400] * 3)
        self.assertEqual(statuses[-1], 429, statuses)
