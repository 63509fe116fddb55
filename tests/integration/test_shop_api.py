"""The storefront's files and the buyer API's CORS answers, over HTTPS against the real
reserve. The browser side of the same is test_shop_browser.py.

The reserve of this stack lists two storefront origins in cors_origins (one written with
a default port and upper case, to show the list is normalised the way browsers send
Origin).
"""

import json
import os
import subprocess
import unittest

import stack

ALLOWED = "https://shop.example.org"
ALLOWED2 = "https://tickets.example.net:8443"


class CorsStack(stack.Stack):
    def env(self):
        e = super().env()
        e["ONSALE_RESERVE_CORS_ORIGINS"] = "HTTPS://Shop.Example.org:443, https://tickets.example.net:8443"
        return e


def setUpModule():
    stack.module_own_stack(CorsStack("shop-api"))


class Storefront(stack.ReserveTestCase):
    def test_shop_redirects_to_the_slash_keeping_the_query(self):
        r = self.c.get("/shop?event=demo")
        self.assertEqual(r.status, 301, r)
        self.assertEqual(r.header("location"), "/shop/?event=demo")
        q = "event=demo&x=" + "y" * 3000   # long queries are kept whole
        r = self.c.get(f"/shop?{q}")
        self.assertEqual(r.status, 301, r)
        self.assertEqual(r.header("location"), f"/shop/?{q}")

    def test_page_script_and_style_are_served_with_a_strict_csp(self):
        r = self.c.get("/shop/?event=demo")
        self.assertEqual(r.status, 200, r)
        self.assertTrue(r.header("content-type").startswith("text/html"), r.headers)
        csp = r.header("content-security-policy")
        self.assertIsNotNone(csp)
        self.assertNotIn("unsafe-inline", csp)
        self.assertNotIn("unsafe-eval", csp)
        self.assertIn("script-src 'self'", csp)
        self.assertIn("frame-ancestors 'none'", csp)
        self.assertEqual(r.header("x-content-type-options"), "nosniff")
        self.assertEqual(r.header("referrer-policy"), "no-referrer")
        html = r.body.decode()
        self.assertIn('<script src="shop.js"', html)
        self.assertNotRegex(html, r"<script>|<style>|\sstyle=|\son[a-z]+=",
                            "inline script or style would be refused by the CSP")
        for path, ctype in (("/shop/shop.js", "text/javascript"), ("/shop/shop.css", "text/css")):
            r = self.c.get(path)
            self.assertEqual(r.status, 200, r)
            self.assertTrue(r.header("content-type").startswith(ctype), r.headers)
        r = self.c.request("HEAD", "/shop/")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.body, b"")

    def test_config_names_the_waiting_room(self):
        r = self.c.get("/shop/config.json")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json["queue_url"], f"https://127.0.0.1:{self.S.gateway_port}/q/{{event}}")

    def test_unknown_files_and_methods(self):
        for path in ("/shop/nope.js", "/shop/..%2Fadmin", "/shop/a/b"):
            r = self.c.get(path)
            self.assertIn(r.status, (400, 404), r)
            self.assertIsInstance(r.json, dict, r)
        self.assertStatus(self.c.get("/shop/secret.txt"), 404, "not_found")
        self.assertStatus(self.c.post("/shop/", {}), 405, "method_not_allowed")


class Cors(stack.ReserveTestCase):
    def preflight(self, path, origin, method="POST", headers="authorization, content-type"):
        h = {"Origin": origin, "Access-Control-Request-Method": method}
        if headers:
            h["Access-Control-Request-Headers"] = headers
        return self.c.request("OPTIONS", path, headers=h)

    def test_preflight_of_a_listed_origin(self):
        ev = self.new_event(seats=[{"id": "A-1", "section": "A", "price": 100}])
        for origin in (ALLOWED, ALLOWED2):
            r = self.preflight(f"/v1/events/{ev}/holds", origin,
                               headers="authorization, content-type, dpop, idempotency-key")
            self.assertEqual(r.status, 204, r)
            self.assertEqual(r.header("access-control-allow-origin"), origin)
            self.assertIn("Origin", r.header("vary"))
            methods = {m.strip() for m in r.header("access-control-allow-methods").split(",")}
            self.assertLessEqual({"GET", "POST", "DELETE"}, methods)
            hdrs = {h.strip().lower() for h in r.header("access-control-allow-headers").split(",")}
            self.assertLessEqual({"authorization", "content-type", "dpop", "idempotency-key"},
                                 hdrs)
            self.assertGreater(int(r.header("access-control-max-age")), 0)
            self.assertIsNone(r.header("access-control-allow-credentials"))
        r = self.preflight("/v1/holds/abc/confirm", ALLOWED)
        self.assertEqual(r.status, 204, r)

    def test_preflight_of_another_origin_is_refused(self):
        for origin in ("https://evil.example.org", "https://shop.example.org:444",
                       "http://shop.example.org", "null"):
            r = self.preflight("/v1/events/x/holds", origin)
            self.assertStatus(r, 403, "origin_not_allowed", msg=origin)
            self.assertIsNone(r.header("access-control-allow-origin"), origin)

    def test_answers_carry_the_origin_only_when_listed(self):
        ev = self.new_event(seats=[{"id": "A-1", "section": "A", "price": 100}])
        tok = self.S.token(ev, "cors-buyer")
        r = self.c.get(f"/v1/events/{ev}/availability", token=tok, headers={"Origin": ALLOWED})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.header("access-control-allow-origin"), ALLOWED)
        self.assertIn("Retry-After", r.header("access-control-expose-headers"))
        self.assertIsNone(r.header("access-control-allow-credentials"))
        # errors too, so a storefront can read them
        r = self.c.post(f"/v1/events/{ev}/holds", {"seats": ["A-1"]}, token="bad",
                        headers={"Origin": ALLOWED})
        self.assertStatus(r, 401, "invalid_token")
        self.assertEqual(r.header("access-control-allow-origin"), ALLOWED)
        # another origin is served (a browser will not let its page read it) without CORS
        r = self.c.get(f"/v1/events/{ev}/availability", token=tok,
                       headers={"Origin": "https://evil.example.org"})
        self.assertEqual(r.status, 200, r)
        self.assertIsNone(r.header("access-control-allow-origin"))
        # no Origin, no CORS headers
        r = self.c.get(f"/v1/events/{ev}/availability", token=tok)
        self.assertIsNone(r.header("access-control-allow-origin"))

    def test_admin_routes_get_no_cors(self):
        r = self.c.request("OPTIONS", "/admin/events/x",
                           headers={"Origin": ALLOWED, "Access-Control-Request-Method": "PUT"})
        self.assertIsNone(r.header("access-control-allow-origin"), r)
        self.assertNotEqual(r.status, 204, r)

    def test_a_wildcard_or_a_path_is_refused_at_start_up(self):
        conf = os.path.join(self.S.state, "reserve.conf")
        for bad, why in (("*", "wildcard"), ("https://shop.example.org/path", "no path"),
                         ("ftp://shop.example.org", "https://"),
                         ("http://shop.example.org", "loopback")):
            p = subprocess.run([self.S.reserve_bin, "--config", conf, "--port", "0",
                                "--cors_origins", bad], capture_output=True, timeout=30,
                               stdin=subprocess.DEVNULL)
            self.assertNotEqual(p.returncode, 0, f"the reserve started with cors_origins={bad}")
            err = p.stderr.decode("utf-8", "replace")
            self.assertIn("cors_origins", err, bad)
            self.assertIn(why, err, bad)


if __name__ == "__main__":
    unittest.main()


class Examples(stack.ReserveTestCase):
    """docs/examples/ run against this stack, as a reader would after
    `eval "$(deploy/onsale env)"`: join → poll → hold → confirm."""

    def example_env(self, ev):
        p = subprocess.run([self.S.script, "env"], env=self.S.env(), capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        env = dict(os.environ)
        for line in p.stdout.splitlines():
            k, _, v = line.removeprefix("export ").partition("=")
            env[k] = subprocess.run(["sh", "-c", f"printf %s {v}"], capture_output=True,
                                    text=True).stdout
        env["EVENT"] = ev
        return env

    def event_with_room(self, prefix):
        ev = self.new_event(prefix, sections=[{"id": "A", "rows": 1, "seats_per_row": 5,
                                                "price": 4000}], max_per_buyer=4)
        r = self.S.gateway_admin("PUT", f"/admin/events/{ev}",
                                 {"rate_per_minute": 600, "mode": "fifo"})
        self.assertIn(r.status, (200, 201), r)
        return ev

    def run_example(self, args, ev):
        return subprocess.run(args, cwd=self.S.source, env=self.example_env(ev),
                              capture_output=True, text=True, timeout=180,
                              stdin=subprocess.DEVNULL)

    def sold(self, ev):
        seats = self.c.get(f"/v1/events/{ev}/seats").json["seats"]
        return sorted(s["id"] for s in seats if s["status"] == "sold")

    def test_curl_example_books_a_seat(self):
        ev = self.event_with_room("ex-curl")
        p = self.run_example(["sh", "docs/examples/curl.sh"], ev)
        self.assertEqual(p.returncode, 0, f"{p.stdout}\n{p.stderr}")
        self.assertRegex(p.stdout, r'booked: \{"booking_id":"bk_')
        stack.wait_for(lambda: self.sold(ev) == ["A-1-1"], 5, what="A-1-1 sold")

    def test_python_example_books_two_seats(self):
        ev = self.event_with_room("ex-py")
        p = self.run_example(["python3", "docs/examples/client.py", "--event", ev, "--seats", "2",
                              "--timeout", "120"], ev)
        self.assertEqual(p.returncode, 0, f"{p.stdout}\n{p.stderr}")
        booking = json.loads(p.stdout.strip().splitlines()[-1])
        self.assertEqual(booking["state"], "confirmed")
        self.assertEqual(booking["seats"], ["A-1-1", "A-1-2"])
        stack.wait_for(lambda: self.sold(ev) == ["A-1-1", "A-1-2"], 5, what="two seats sold")

    def test_dpop_example_is_admitted_with_its_key(self):
        """docs/examples/dpop_client.py in a room that binds tickets: joined and polled
        with proofs, admitted with a token whose cnf.jkt is the client's key."""
        ev = stack.new_id("ex-dpop")
        r = self.S.gateway_admin("PUT", f"/admin/events/{ev}",
                                 {"rate_per_minute": 600, "mode": "fifo", "dpop": True})
        self.assertIn(r.status, (200, 201), r)
        p = self.run_example(["python3", "docs/examples/dpop_client.py", "--event", ev,
                              "--timeout", "60"], ev)
        self.assertEqual(p.returncode, 0, f"{p.stdout}\n{p.stderr}")
        out = json.loads(p.stdout.strip().splitlines()[-1])
        self.assertEqual(out["cnf"], {"jkt": out["jkt"]})

    def test_python_example_reports_a_declined_card(self):
        ev = self.event_with_room("ex-decl")
        p = self.run_example(["python3", "docs/examples/client.py", "--event", ev,
                              "--card", "tok_chargeDeclined", "--timeout", "120"], ev)
        self.assertEqual(p.returncode, 1, f"{p.stdout}\n{p.stderr}")
        self.assertEqual(json.loads(p.stdout.strip().splitlines()[-1])["error"], "payment_declined")
        self.assertEqual(self.sold(ev), [])
