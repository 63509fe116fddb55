"""The fan's whole night in a real headless browser.

A private stack (stack.py) whose reserve lists one extra origin in cors_origins (the
gateway reached as https://localhost:<port>) and gives the payment provider 3 s before a
payment counts as pending. tests/integration/browser/shop_journey.mjs drives Debian's
chromium through playwright-core:

- journey: queue page → admitted → the reserve's storefront (the admission token in the
  URL fragment, never the query) → two seats chosen with the keyboard → hold with its
  countdown → checkout extends it → card → booked;
- bound: a "dpop" room; the storefront's own key is named on its link to the queue, the
  token comes back bound to it, the hold goes with the storefront's proof, the token
  alone (a copied link) is refused, and a token bound to another key is named so;
- loser: the seat the fan picked is held by another fan first → told so → another seat →
  booked;
- best: best available for two seats in a row of five where another fan holds the 2nd
  and 4th → told no two together are left and how many are free apart → "seats apart
  are fine" → two seats held, the row's middle among them;
- declined: the card is declined → told so, the seats stay held → another card → booked;
- slow: the bank answers after the reserve's provider timeout → "pending" → booked;
- expired: a 3-second hold runs out on screen → told so, back to the map, seat free;
- 3-D Secure: the card needs the bank's confirmation → the storefront sends the fan to
  the simulator's challenge page; approve → back to the storefront → booked; fail → "the
  payment did not go through", the seat still held until the fan releases it; never
  answered → when the hold's max life passes the checkout is released (the intent
  canceled), the storefront says so, the seat is free and nothing was charged;
- cors: the buyer API from a page of another origin: the listed origin works (preflighted
  POST and DELETE included), an unlisted one is blocked by the browser.

Afterwards the seat maps must show exactly what the browser booked. Screenshots:
tests/integration/browser/out/shop-*.png (git-ignored).

Skipped (with the reason) only when chromium, node or the browser test's node_modules are
missing, as test_gateway_browser.py.
"""

import json
import os
import subprocess
import tempfile
import unittest

import stack
from test_gateway_browser import BROWSER_DIR, CHROMIUM, NODE, SKIP

SCRIPT = os.path.join(BROWSER_DIR, "shop_journey.mjs")
NODE_TIMEOUT = 240
SEATS = {"sections": [{"id": "A", "rows": 3, "seats_per_row": 8, "price": 5000},
                      {"id": "B", "rows": 2, "seats_per_row": 8, "price": 3000}],
         "pools": [{"id": "floor", "capacity": 20, "price": 2000}],
         "currency": "EUR", "hold_ttl_seconds": 120, "checkout_extension_seconds": 600,
         "max_hold_seconds": 900, "max_per_buyer": 4}


class ShopStack(stack.Stack):
    """The stack with the storefront's CORS origin and a short provider timeout."""

    def env(self):
        e = super().env()
        e["ONSALE_RESERVE_CORS_ORIGINS"] = f"https://localhost:{self.gateway_port}"
        e["ONSALE_RESERVE_PAY_TIMEOUT_MS"] = "3000"
        return e


def setUpModule():
    if SKIP:
        raise unittest.SkipTest(SKIP)
    stack.module_own_stack(ShopStack("shop-browser"))


class ShopInBrowser(unittest.TestCase):
    maxDiff = 4000

    @property
    def S(self):
        return stack._CURRENT

    def event(self, prefix):
        ev = stack.new_id(prefix)
        self.S.create_event(ev, **SEATS)
        return ev

    def seat_status(self, ev, token):
        c = self.S.client()
        try:
            r = c.get(f"/v1/events/{ev}/seats", token=token)
            self.assertEqual(r.status, 200, r)
            return {s["id"]: s["status"] for s in r.json["seats"]}
        finally:
            c.close()

    def wait_status(self, ev, token, want):
        def ok():
            st = self.seat_status(ev, token)
            return all(st[k] == v for k, v in want.items()) and st
        return stack.wait_for(ok, 10, interval=0.25, what=f"seat map of {ev} to show {want}")

    def run_browser(self, spec, scenario):
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(spec, f)
            path = f.name
        self.addCleanup(os.unlink, path)
        p = subprocess.run([NODE, SCRIPT, "--spec", path, "--scenario", scenario], cwd=BROWSER_DIR,
                           capture_output=True, timeout=NODE_TIMEOUT, stdin=subprocess.DEVNULL)
        out = p.stdout.decode("utf-8", "replace").strip()
        err = p.stderr.decode("utf-8", "replace").strip()
        try:
            result = json.loads(out.splitlines()[-1]) if out else None
        except ValueError:
            result = None
        self.assertIsNotNone(result, f"no result from the browser test: {out}\n{err}")
        failed = [c for c in result.get("checks", []) if not c.get("ok")]
        self.assertTrue(result.get("ok"), f"{result.get('error')}\nfailed: {failed}\nstderr: {err[-2000:]}")
        self.assertEqual(result["tls"], "ca", "the dev CA was not trusted; certificate errors were ignored")
        return result

    def base_spec(self):
        return {"gateway": f"https://127.0.0.1:{self.S.gateway_port}",
                "reserve": f"https://127.0.0.1:{self.S.reserve_port}",
                "ca": self.S.ca, "chromium": CHROMIUM, "timeout": 120}

    def test_journey_from_the_queue_to_a_booking(self):
        ev = self.event("shop-j")
        storefront = f"https://127.0.0.1:{self.S.reserve_port}/shop/?event={ev}"
        c = stack.Client(self.S.gateway_admin_port, self.S.ctx)
        try:
            r = c.put(f"/admin/events/{ev}", {"rate_per_minute": 600, "max_active": 0,
                                              "mode": "fifo", "redirect_url": storefront},
                      token=self.S.gateway_admin_token)
            self.assertIn(r.status, (200, 201), f"PUT gateway /admin/events/{ev}: {r!r}")
            handoff = r.json.get("handoff", r.json.get("settings", {}).get("handoff"))
        finally:
            c.close()
        if handoff is None:
            self.skipTest("this gateway has no fragment hand-off yet (no 'handoff' setting): "
                          "it would put the token in the storefront's query string")
        self.assertEqual(handoff, "fragment", "the default hand-off puts the token in the fragment")
        spec = self.base_spec()
        spec["journey"] = {"event": ev}
        res = self.run_browser(spec, "journey")["scenarios"]["journey"]
        self.assertTrue(res["booking"].startswith("bk_"), res)
        self.assertEqual(res["landing_query"], f"?event={ev}", "the storefront URL kept only its own query")
        self.wait_status(ev, self.S.token(ev, "checker"), {"A-1-1": "sold", "A-1-2": "sold",
                                                           "A-1-3": "available"})
        for name in ("queue", "map", "phone", "hold", "checkout", "booked", "left"):
            self.assertTrue(os.path.exists(os.path.join(BROWSER_DIR, "out", f"shop-{name}.png")), name)

    def test_bound_admission_holds_only_in_the_storefront_that_asked(self):
        """A "dpop" room: storefront (no token) → its link to the queue names its key →
        queue → admitted with a token bound to that key → a hold with the storefront's
        proof; the token alone is refused, and a token bound to another key is named so."""
        ev = self.event("shop-b")
        storefront = f"https://127.0.0.1:{self.S.reserve_port}/shop/?event={ev}"
        c = stack.Client(self.S.gateway_admin_port, self.S.ctx)
        try:
            r = c.put(f"/admin/events/{ev}", {"rate_per_minute": 600, "max_active": 0,
                                              "mode": "fifo", "redirect_url": storefront,
                                              "dpop": True},
                      token=self.S.gateway_admin_token)
            self.assertIn(r.status, (200, 201), f"PUT gateway /admin/events/{ev}: {r!r}")
        finally:
            c.close()
        from dpop_key import DPoPKey
        claims = self.S.claims(ev, "someone-else")
        claims["cnf"] = {"jkt": DPoPKey().jkt}
        spec = self.base_spec()
        spec["bound"] = {"event": ev, "foreign": self.S.sign(claims)}
        res = self.run_browser(spec, "bound")["scenarios"]["bound"]
        self.assertEqual(res["copied"], 401, res)
        self.wait_status(ev, self.S.token(ev, "checker"), {"A-2-1": "held", "A-2-2": "available"})

    def test_3ds_approve_fail_and_abandon(self):
        eva, evf = self.event("shop-3a"), self.event("shop-3f")
        evx = stack.new_id("shop-3x")
        self.S.create_event(evx, **{**SEATS, "hold_ttl_seconds": 5,
                                    "checkout_extension_seconds": 1, "max_hold_seconds": 8})
        t = self.S.token
        spec = self.base_spec()
        spec["timeout"] = 180
        spec["threedsApprove"] = {"event": eva, "token": t(eva, "fan-3ds-ok")}
        spec["threedsFail"] = {"event": evf, "token": t(evf, "fan-3ds-fail")}
        spec["threedsAbandon"] = {"event": evx, "token": t(evx, "fan-3ds-gone")}
        res = self.run_browser(spec, "all")["scenarios"]
        self.assertEqual(sorted(res), ["threedsAbandon", "threedsApprove", "threedsFail"])
        checker = "checker"
        # approved at the bank: booked
        self.wait_status(eva, t(eva, checker), {"A-1-5": "sold"})
        # failed at the bank, then released by the fan: free again
        self.wait_status(evf, t(evf, checker), {"A-1-6": "available"})
        # never answered: the hold expired, the checkout was released, nothing charged
        self.wait_status(evx, t(evx, checker), {"A-1-7": "available"})
        states = dict(self.S.sql(f"select event_id, state from checkouts "
                                 f"where event_id in ('{eva}', '{evf}', '{evx}')"))
        self.assertEqual(states, {eva: "confirmed", evf: "failed", evx: "released"})

    def test_loser_declined_slow_card_expiry_and_cors(self):
        evl, evd, evs, evc = (self.event(p) for p in ("shop-l", "shop-d", "shop-s", "shop-c"))
        eve = stack.new_id("shop-e")
        self.S.create_event(eve, **{**SEATS, "hold_ttl_seconds": 3, "max_hold_seconds": 600})
        t = self.S.token
        spec = self.base_spec()
        spec["loser"] = {"event": evl, "token": t(evl, "fan-loser"), "rival": t(evl, "fan-rival")}
        evb = stack.new_id("shop-b")
        self.S.create_event(evb, sections=[{"id": "A", "rows": 1, "seats_per_row": 5,
                                            "price": 5000}])
        spec["best"] = {"event": evb, "token": t(evb, "fan-best"), "rival": t(evb, "fan-rival")}
        spec["declined"] = {"event": evd, "token": t(evd, "fan-declined")}
        spec["slow"] = {"event": evs, "token": t(evs, "fan-slow")}
        spec["expired"] = {"event": eve, "token": t(eve, "fan-expired")}
        spec["cors"] = {"event": evc, "token": t(evc, "fan-cors"),
                        "allowed": f"https://localhost:{self.S.gateway_port}",
                        "denied": f"https://127.0.0.1:{self.S.gateway_port}"}
        res = self.run_browser(spec, "all")["scenarios"]
        self.assertEqual(sorted(res), ["best", "cors", "declined", "expired", "loser", "slow"])
        checker = "checker"
        # the rival's hold stands, the loser booked the next seat
        self.wait_status(evl, t(evl, checker), {"A-1-3": "held", "A-1-4": "sold"})
        # a declined card then a good one: one booking
        self.wait_status(evd, t(evd, checker), {"A-2-1": "sold"})
        # the slow bank's payment ended in a booking, not a refund
        self.wait_status(evs, t(evs, checker), {"A-2-2": "sold"})
        # best available held the middle seat and one beside the rival's
        self.wait_status(evb, t(evb, checker), {"A-1-3": "held"})
        # the expired hold left nothing behind
        self.wait_status(eve, t(eve, checker), {"A-3-1": "available"})
        # the cross-origin hold was released again
        self.wait_status(evc, t(evc, checker), {"B-1-1": "available"})
        for name in ("taken", "declined", "pending", "expired"):
            self.assertTrue(os.path.exists(os.path.join(BROWSER_DIR, "out", f"shop-{name}.png")), name)


if __name__ == "__main__":
    unittest.main()
