"""The queue page in a real headless browser.

Brings up a private stack (stack.py: deploy/onsale up with its own ONSALE_STATE and ports,
the gateway included), creates a waiting room with a few fans already in line, and runs
tests/integration/browser/queue_page.mjs: Debian's chromium, driven by playwright-core,
opens GET /q/{event} over HTTPS (the stack's dev CA trusted through a private NSS
database), checks that the position and the progress bar are shown, and waits — touching
nothing — until the page advances by itself to admission and hands the admission token to
the room's redirect_url: in the URL fragment (handoff "fragment", the default) or by a
POST of the form field admission_token (handoff "post"), never in a URL the shop's server
sees (docs/api.md v1.1). The same again with JavaScript off, where the server-rendered page and
its meta refresh must get there alone (for "post" the fan presses the page's button).
In a room with "dpop" the page's WebCrypto key binds the ticket and signs the admitting
poll's proof (and, for "post", the proof of its own reload).

Screenshots: tests/integration/browser/out/ (queue.png, queue-phone.png, admitted.png,
landed.png, and the -nojs variants; failure*.png when a check fails). Git-ignored.
The page in every language and state (browser/page_gallery.mjs, one browser, one load
per page, no waiting in line): <build dir>/screenshots/queue-page/<lang>-<state>.png.

Skipped (with the reason) only when chromium, node, or the browser test's node_modules
(`npm install` in tests/integration/browser) are missing.
"""

import json
import os
import shutil
import subprocess
import unittest

import stack

HERE = os.path.dirname(os.path.abspath(__file__))
BROWSER_DIR = os.path.join(HERE, "browser")
SCRIPT = os.path.join(BROWSER_DIR, "queue_page.mjs")
GALLERY = os.path.join(BROWSER_DIR, "page_gallery.mjs")
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
NODE = shutil.which("node") or shutil.which("nodejs")

AHEAD = 5               # fans already in line when the browser arrives
RATE_PER_MINUTE = 30    # so the browser waits about AHEAD * 2 s at the front
NODE_TIMEOUT = 150      # the node script's own bound is --timeout below
PAGE_TIMEOUT = 90


def _skip_reason():
    if not os.access(CHROMIUM, os.X_OK):
        return f"no chromium at {CHROMIUM} (apt-get install chromium)"
    if NODE is None:
        return "node is not installed (apt-get install nodejs npm)"
    if not os.path.isdir(os.path.join(BROWSER_DIR, "node_modules", "playwright-core")):
        return ("playwright-core is not installed: run `npm install` in "
                "tests/integration/browser (it never downloads a browser; chromium comes "
                "from Debian)")
    return None


SKIP = _skip_reason()


solve = stack.pow_example.solve  # docs/api.md "Proof of work"


def setUpModule():
    if SKIP:
        raise unittest.SkipTest(SKIP)
    stack.module_stack("browser")


class QueuePageInBrowser(unittest.TestCase):
    maxDiff = 4000

    @property
    def S(self):
        return stack._CURRENT

    def gateway(self):
        return stack.Client(self.S.gateway_port, self.S.ctx)

    def join_ahead(self, c, ev, pow_on, dpop):
        """One fan ahead joins by the API, solving the room's challenge when it has one and
        binding its ticket to a key of its own in a room with dpop (API clients' way)."""
        headers = {}
        if dpop:
            from dpop_key import DPoPKey
            url = f"https://127.0.0.1:{self.S.gateway_port}/q/{ev}/join"
            headers["DPoP"] = DPoPKey().proof("POST", url)
        if pow_on:
            ch = c.get(f"/q/{ev}/challenge").json
            headers["Onsale-Pow"] = f"{ch['challenge']}.{solve(ch['challenge'], ch['difficulty'])}"
        return c.post(f"/q/{ev}/join", {}, headers=headers)

    def room(self, prefix, handoff="fragment", dpop=False, pow_on=False):
        """A FIFO waiting room, open now, with AHEAD fans in line; returns (event,
        redirect_url)."""
        ev = stack.new_id(prefix)
        redirect = f"https://shop.onsale.test/checkout?ev={ev}"
        c = self.gateway()
        try:
            # paused while the fans ahead join, so the line starts moving only now, however
            # long the set-up took on a loaded machine
            r = self.S.gateway_admin("PUT", f"/admin/events/{ev}",
                                     {"rate_per_minute": RATE_PER_MINUTE, "max_active": 0,
                                      "mode": "fifo", "paused": True, "redirect_url": redirect,
                                      "handoff": handoff, "dpop": dpop,
                                      "pow": pow_on})
            self.assertIn(r.status, (200, 201), f"PUT /admin/events/{ev}: {r!r}")
        finally:
            c.close()
        self.line_up(ev, lambda c, i: self.join_ahead(c, ev, pow_on, dpop))
        return ev, redirect

    def line_up(self, ev, join):
        """AHEAD fans join the paused room ev, each by join(client, i) on a connection (and
        without a cookie) of its own; then the room resumes."""
        for i in range(AHEAD):
            c = self.gateway()
            try:
                r = join(c, i)
                self.assertEqual(r.status, 201, f"join {i + 1} of the fans ahead: {r!r}")
                self.assertEqual(r.json.get("state"), "queued", f"join {i + 1}: {r!r}")
            finally:
                c.close()
        r = self.S.gateway_admin("PATCH", f"/admin/events/{ev}", {"paused": False})
        self.assertEqual(r.status, 200, f"resuming {ev}: {r!r}")

    def run_browser(self, ev, redirect, mode, handoff="fragment", code=None, next_phase=None,
                    site=None, customer=None):
        args = [NODE, SCRIPT, "--url", f"https://127.0.0.1:{self.S.gateway_port}",
                "--event", ev, "--ca", self.S.ca, "--redirect", redirect, "--mode", mode,
                "--handoff", handoff, *(["--code", code] if code else []),
                *(["--next-phase", next_phase] if next_phase else []),
                *(["--site", site, "--customer", customer] if site else []),
                "--timeout", str(PAGE_TIMEOUT), "--chromium", CHROMIUM]
        p = subprocess.run(args, cwd=BROWSER_DIR, capture_output=True, timeout=NODE_TIMEOUT,
                           stdin=subprocess.DEVNULL)
        out = p.stdout.decode("utf-8", "replace").strip()
        err = p.stderr.decode("utf-8", "replace").strip()
        try:
            result = json.loads(out.splitlines()[-1]) if out else None
        except ValueError:
            result = None
        if p.returncode == 2 and result is None:
            self.fail(f"the browser test could not run: {err or out}")
        self.assertIsNotNone(result, f"no result from the browser test: {out}\n{err}")
        failed = [c for c in result.get("checks", []) if not c.get("ok")]
        self.assertTrue(result.get("ok"),
                        f"{mode}: {result.get('error')}\nfailed: {failed}\n"
                        f"waiting for: {result.get('waiting_for')} "
                        f"(the page: {result.get('state_at_timeout')})\n"
                        f"seen: {result.get('seen')}\nstderr: {err[-2000:]}")
        return result

    def test_queue_page_advances_and_redirects(self):
        ev, redirect = self.room("br-js")
        res = self.run_browser(ev, redirect, "js")
        self.assertEqual(res["tls"], "ca", "the dev CA was not trusted; certificate errors were ignored")
        self.assertTrue(res["tls_verified"])
        self.assertGreaterEqual(int(res["first"]["position"].replace(",", "")), 1)
        self.assertGreaterEqual(res["polls"], 1)
        self.assertTrue(os.path.exists(os.path.join(BROWSER_DIR, "out", "queue.png")))

    def test_queue_page_binds_its_key(self):
        """dpop: the page makes a non-extractable key, joins and polls with proofs, and is
        admitted (the admitting poll refuses anything else)."""
        ev, redirect = self.room("br-dpop", dpop=True)
        res = self.run_browser(ev, redirect, "js")
        self.assertGreaterEqual(res["polls"], 1)

    def test_post_handoff_with_dpop(self):
        """dpop and handoff "post": the page's reload carries its proof in ?dpop=."""
        ev, redirect = self.room("br-dpop-post", handoff="post", dpop=True)
        self.run_browser(ev, redirect, "js", handoff="post")

    def test_queue_page_solves_the_proof_of_work(self):
        """A room with proof of work at the gateway's base difficulty: the page solves the
        challenge in its Web Worker under the page's CSP (a violation fails the run),
        joins, and goes on to admission as before. Prints the solve time."""
        ev, redirect = self.room("br-pow", pow_on=True)
        res = self.run_browser(ev, redirect, "js")
        pw = res.get("pow")
        self.assertIsNotNone(pw, "the page joined without solving a challenge")
        self.assertGreater(pw["tried"], 0)
        print(f"\nchromium solved {pw['bits']} bits in {pw['ms']} ms "
              f"({pw['tried']} hashes, {pw['ms'] * 1e6 / pw['tried']:.0f} ns/hash)", flush=True)

    def presale_room(self, prefix):
        """A room in a presale phase for code holders with AHEAD holders already in line,
        and one more code issued for the browser's fan; returns (event, redirect_url,
        code). As in room(), the phase admits at RATE_PER_MINUTE and the room is paused
        while the holders ahead join: a fan alone at the front is admitted on the next
        tick, and a page without JavaScript, rendered after its form's 303, would show
        "admitted" without ever having shown the place it took."""
        import csv
        import io
        import time
        ev = stack.new_id(prefix)
        redirect = f"https://shop.onsale.test/checkout?ev={ev}"
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 60))
        r = self.S.gateway_admin("PUT", f"/admin/events/{ev}", {
            "rate_per_minute": RATE_PER_MINUTE, "mode": "fifo", "redirect_url": redirect,
            "dpop": False, "pow": False, "paused": True,
            "phases": [{"name": "presale", "starts_at": at, "rate_per_minute": RATE_PER_MINUTE,
                        "requires_code": True,
                        "text_during": "Presale: enter the code from your invitation."}]})
        self.assertIn(r.status, (200, 201), f"PUT /admin/events/{ev}: {r!r}")
        r = self.S.gateway_admin("POST", f"/admin/events/{ev}/codes",
                                 {"phase": "presale", "count": AHEAD + 1})
        self.assertEqual(r.status, 201, f"issuing codes: {r!r}")
        r = self.S.gateway_admin("GET", f"/admin/events/{ev}/codes/1.csv")
        self.assertEqual(r.status, 200, f"exporting codes: {r!r}")
        codes = [row["code"] for row in csv.DictReader(io.StringIO(r.body.decode()))]
        self.assertEqual(len(codes), AHEAD + 1, f"the export: {r.body[:200]!r}")
        self.line_up(ev, lambda c, i: c.post(f"/q/{ev}/join", {},
                                             headers={"Onsale-Code": codes[i]}))
        return ev, redirect, codes[AHEAD]

    def test_presale_journey(self):
        """A presale phase: the page names it and asks for the code, refuses a wrong one
        with its reason, takes the fan's code and goes on to admission."""
        ev, redirect, code = self.presale_room("br-presale")
        res = self.run_browser(ev, redirect, "js", code=code)
        self.assertEqual(res["phase"], "presale")
        self.assertTrue(os.path.exists(os.path.join(BROWSER_DIR, "out", "code.png")))

    def test_the_page_follows_the_schedule(self):
        """The presale ends while the page asks for a code: at the general sale's start the
        page names it, drops the code field and takes the place by itself."""
        import time
        ev = stack.new_id("br-phases")
        redirect = f"https://shop.onsale.test/checkout?ev={ev}"
        t = time.time()
        iso = lambda ts: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))  # noqa: E731
        r = self.S.gateway_admin("PUT", f"/admin/events/{ev}", {
            "rate_per_minute": RATE_PER_MINUTE, "mode": "fifo", "redirect_url": redirect,
            "dpop": False, "pow": False,
            "phases": [{"name": "presale", "starts_at": iso(t - 60), "rate_per_minute": 600,
                        "requires_code": True},
                       {"name": "general", "starts_at": iso(t + 8),
                        "rate_per_minute": RATE_PER_MINUTE,  # queued ~2 s, not one tick
                        "text_during": "Everyone welcome"}]})
        self.assertIn(r.status, (200, 201), f"PUT /admin/events/{ev}: {r!r}")
        res = self.run_browser(ev, redirect, "js", next_phase="general")
        self.assertEqual((res["phase"], res["next_phase"]), ("presale", "general"))

    def test_presale_journey_without_javascript(self):
        ev, redirect, code = self.presale_room("br-presale-nojs")
        res = self.run_browser(ev, redirect, "nojs", code=code)
        self.assertEqual(res["phase"], "presale")

    def test_queue_page_without_javascript(self):
        ev, redirect = self.room("br-nojs")
        res = self.run_browser(ev, redirect, "nojs")
        self.assertGreaterEqual(res["page_loads"], 2)
        self.assertTrue(os.path.exists(os.path.join(BROWSER_DIR, "out", "queue-nojs.png")))

    def test_dashboard_under_its_csp(self):
        """The operator dashboard's script runs under its hash-based CSP (no
        'unsafe-inline'), reaches the admin API and lists a room; no CSP violation."""
        ev, _ = self.room("br-dash")
        args = [NODE, SCRIPT, "--url", f"https://127.0.0.1:{self.S.gateway_admin_port}",
                "--event", ev, "--ca", self.S.ca, "--mode", "dashboard",
                "--timeout", str(PAGE_TIMEOUT), "--chromium", CHROMIUM]
        env = dict(os.environ, ONSALE_ADMIN_TOKEN=self.S.gateway_admin_token)
        p = subprocess.run(args, cwd=BROWSER_DIR, capture_output=True, timeout=NODE_TIMEOUT,
                           stdin=subprocess.DEVNULL, env=env)
        out = p.stdout.decode("utf-8", "replace").strip()
        result = json.loads(out.splitlines()[-1]) if out else {}
        self.assertTrue(result.get("ok"), f"dashboard: {result.get('error')}\n"
                        f"{p.stderr.decode('utf-8', 'replace')[-2000:]}")

    def test_post_handoff(self):
        """handoff "post": the page posts admission_token to redirect_url by itself, and
        its CSP lets the form go to redirect_url's origin only."""
        ev, redirect = self.room("br-post", handoff="post")
        res = self.run_browser(ev, redirect, "js", handoff="post")
        self.assertIn("form-action https://shop.onsale.test", res["csp_form_action"])

    def sold_out_for_now(self, base):
        """A fan in line while every seat is held (the room follows the reserve's stock): the
        gallery's "returns" page, loaded with that fan's ticket."""
        ev = stack.new_id("br-gallery-returns")
        self.S.create_event(ev, sections=[{"id": "A", "rows": 1, "seats_per_row": 1,
                                           "price": 1000}], hold_ttl_seconds=300)
        r = self.S.gateway_admin("PUT", f"/admin/events/{ev}", dict(base, paused=True))
        self.assertIn(r.status, (200, 201), r)
        c = stack.Client(self.S.gateway_port, self.S.ctx)
        rc = self.S.client()
        try:
            ticket = c.post(f"/q/{ev}/join", {}).json["ticket"]
            h = rc.post(f"/v1/events/{ev}/holds", {"seats": ["A-1-1"]},
                        token=self.S.token(ev, "gallery-walk-in"))
            self.assertEqual(h.status, 201, h)
            stack.wait_for(lambda: c.get(f"/q/{ev}/status", token=ticket).json.get(
                "returns_possible"), 10, interval=0.2, what="sold out, for now")
        finally:
            c.close()
            rc.close()
        return {"name": "returns", "event": ev, "state": "returns", "ticket": ticket}

    def test_page_in_every_language_and_phase(self):
        """The queue page in English, German, French and Spanish, in each state a fan can
        see it in: one browser, one load per page, each room already in its state (nobody
        waits in line). Every page in its language, nothing blocked by its policy, the
        branded room in its colour and with its logo; a screenshot of each."""
        import time
        iso = lambda ts: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))  # noqa: E731
        now = time.time()
        base = {"rate_per_minute": RATE_PER_MINUTE, "dpop": False, "pow": False}
        logo = "https://cdn.onsale.test/logo.svg"
        rooms = {
            "queued": dict(base, paused=True, brand_title="Summer Tour", brand_logo_url=logo,
                           brand_color="#c81e4b", brand_background="#fdf6e3",
                           phases=[{"name": "general", "starts_at": iso(now - 60),
                                    "rate_per_minute": RATE_PER_MINUTE,
                                    "text_during": "General sale: up to four tickets each."}]),
            "prequeue": dict(base, prequeue_at=iso(now - 60), opens_at=iso(now + 86400 + 3600)),
            "code": dict(base, phases=[{"name": "presale", "starts_at": iso(now - 60),
                                        "rate_per_minute": RATE_PER_MINUTE,
                                        "requires_code": True}]),
            "sold_out": dict(base, sold_out=True),
            "closed": dict(base, opens_at=iso(now - 7200), closes_at=iso(now - 3600)),
        }
        states = {"queued": "queued", "prequeue": "prequeue", "code": "new",
                  "sold_out": "sold_out", "closed": "closed", "unknown": "unknown"}
        spec = []
        for name, settings in rooms.items():
            ev = stack.new_id(f"br-gallery-{name.replace('_', '-')}")
            r = self.S.gateway_admin("PUT", f"/admin/events/{ev}", settings)
            self.assertIn(r.status, (200, 201), f"PUT /admin/events/{ev}: {r!r}")
            spec.append({"name": name, "event": ev, "state": states[name]})
        spec.append(self.sold_out_for_now(base))
        spec.append({"name": "unknown", "event": stack.new_id("br-gallery-none"),
                     "state": "unknown"})
        out = os.path.join(self.S.build, "screenshots", "queue-page")
        args = [NODE, GALLERY, "--url", f"https://127.0.0.1:{self.S.gateway_port}",
                "--ca", self.S.ca, "--rooms", json.dumps(spec), "--langs", "en,de,fr,es",
                "--out", out, "--brand-room", "queued", "--brand-color", "#c81e4b",
                "--logo", logo, "--timeout", "30", "--chromium", CHROMIUM]
        p = subprocess.run(args, cwd=BROWSER_DIR, capture_output=True, timeout=NODE_TIMEOUT,
                           stdin=subprocess.DEVNULL)
        lines = p.stdout.decode("utf-8", "replace").strip().splitlines()
        result = json.loads(lines[-1]) if lines else {}
        failed = [c for c in result.get("checks", []) if not c.get("ok")]
        self.assertTrue(result.get("ok"), f"{result.get('error')}\nfailed: {failed}\n"
                        f"{p.stderr.decode('utf-8', 'replace')[-2000:]}")
        self.assertEqual(len(result["shots"]), 4 * len(spec))
        print(f"\nqueue page screenshots: {out}", flush=True)

    def test_from_the_sale_site_with_an_enqueue_token(self):
        """The sale site sends its customer (docs/examples/enqueue.py's form page, signed by
        the local stack's sale-site key): the browser posts the token from the site's origin,
        lands on the queue page with the customer's place, waits and is admitted as the
        customer (the admission token's sub)."""
        ev, redirect = self.room("br-enq")
        self.S.gateway_admin("PATCH", f"/admin/events/{ev}", {"invite_only": True})
        page = os.path.join(self.S.state, f"site-{ev}.html")
        key = os.path.join(self.S.state, "keys", "sale-site-key.pem")
        with open(page, "w") as f:
            subprocess.run(["/usr/bin/python3", os.path.join(self.S.source, "docs", "examples",
                                                              "enqueue.py"),
                            "form", "--key", key, "--customer", "cust-77", "--event", ev,
                            "--gateway", f"https://127.0.0.1:{self.S.gateway_port}"],
                           stdout=f, check=True, timeout=60, stdin=subprocess.DEVNULL)
        res = self.run_browser(ev, redirect, "js", site=page, customer="cust-77")
        self.assertGreaterEqual(len(res["positions"]), 1)

    def test_post_handoff_without_javascript(self):
        ev, redirect = self.room("br-post-nojs", handoff="post")
        res = self.run_browser(ev, redirect, "nojs", handoff="post")
        self.assertGreaterEqual(res["page_loads"], 2)


if __name__ == "__main__":
    unittest.main()
