"""Gateway API: operator auth and settings validation, queue tickets that cannot be
forged or moved (docs/design.md invariant 10), the admission JWT checked by an independent
implementation (python3-jwt) against the JWKS and accepted by reserve (invariant 9), the
same admission for repeated polls, the per-address join limit, sold out / closed."""

import hashlib
import json
import os
import time

import gwstack
import stack
from gwstack import ticket_fields, ticket_number


def setUpModule():
    gwstack.module_stack("gw-api", gateways=1)


class Ops(gwstack.GatewayTestCase):
    def test_health_ready_metrics_jwks(self):
        self.assertStatus(self.c.get("/healthz"), 200)
        self.assertStatus(self.c.get("/readyz"), 200)
        m = self.a.get("/metrics")
        self.assertStatus(m, 200)
        for name in ("onsale_gateway_joins_total", "onsale_gateway_status_polls_total",
                     "onsale_gateway_admissions_total", "onsale_gateway_rejected_tickets_total",
                     "onsale_gateway_request_seconds_bucket"):
            self.assertIn(name, m.body.decode(), name)
        keys = gwstack.jwks_keys(self.GS.g)["keys"]
        self.assertEqual(len(keys), 1, keys)
        for f in ("kty", "crv", "x", "y", "kid", "alg", "use"):
            self.assertIn(f, keys[0])
        self.assertEqual((keys[0]["kty"], keys[0]["crv"], keys[0]["alg"]), ("EC", "P-256", "ES256"))
        self.assertEqual(keys[0]["kid"], self.GS.S.kid, "JWKS kid differs from onsale-token's")

    def test_nosniff_hsts_csp(self):
        """Nosniff and HSTS on every answer; the HTML pages carry a CSP with no
        'unsafe-inline' (their own script and style allowed by hash)."""
        ev = self.new_room(rate_per_minute=60)
        answers = [self.c.get("/healthz"), self.c.get("/readyz"), self.a.get("/metrics"),
                   self.c.get("/.well-known/jwks.json"), self.c.get("/nope"),
                   self.c.post(f"/q/{ev}/join"), self.c.get(f"/q/{ev}/status", token="forged"),
                   self.a.get("/admin/events"), self.c.get(f"/q/{ev}"), self.a.get("/admin/"),
                   self.c.get("/q/e/join")]
        statuses = set()
        for r in answers:
            statuses.add(r.status)
            self.assertEqual(r.header("X-Content-Type-Options"), "nosniff", repr(r))
            self.assertRegex(r.header("Strict-Transport-Security") or "", r"^max-age=\d{7,}",
                             repr(r))
        self.assertTrue({200, 201, 401, 404, 405} <= statuses, statuses)
        for r in answers[-3:-1]:  # the queue page and the dashboard
            self.assertTrue(r.header("Content-Type").startswith("text/html"))
            csp = r.header("Content-Security-Policy") or ""
            self.assertNotIn("unsafe", csp)
            self.assertRegex(csp, r"script-src 'sha256-[A-Za-z0-9+/]{43}=' ;")
            self.assertRegex(csp, r"style-src 'sha256-[A-Za-z0-9+/]{43}=' ;")
            self.assertIn("default-src 'none'", csp)

    def test_unknown_paths(self):
        self.assertStatus(self.c.get("/nope"), 404, "not_found")
        self.assertStatus(self.c.get("/q/bad%20id/status"), 400, "invalid_request")
        self.assertStatus(self.c.post("/q/nonexistent-room/join"), 404, "unknown_event")
        self.assertStatus(self.c.get("/q/e/join"), 405, "method_not_allowed")


class AdminAuth(gwstack.GatewayTestCase):
    def test_admin_without_or_with_wrong_token_is_401(self):
        ev = self.new_room(rate_per_minute=60)
        calls = [("GET", "/admin/events"), ("GET", f"/admin/events/{ev}"),
                 ("PUT", f"/admin/events/{ev}"), ("PATCH", f"/admin/events/{ev}"),
                 ("DELETE", f"/admin/events/{ev}")]
        good = self.GS.S.gateway_admin_token
        for method, path in calls:
            for token in (None, "wrong-token-wrong-token", good[:-1], good + "x", "",
                          self.GS.S.admin_token):  # the reserve's token is not the gateway's
                r = self.a.request(method, path, body={"rate_per_minute": 1}, token=token)
                self.assertStatus(r, 401, "unauthorized", msg=f"{method} {path} token={token!r}:")
        # and nothing changed
        r = self.GS.admin("GET", f"/admin/events/{ev}")
        self.assertStatus(r, 200)
        self.assertEqual(r.json["rate_per_minute"], 60)


class Settings(gwstack.GatewayTestCase):
    def test_put_get_patch_delete(self):
        ev = gwstack.new_id()
        r = self.GS.admin("PUT", f"/admin/events/{ev}",
                          {"rate_per_minute": 120, "max_active": 7, "mode": "fifo",
                           "admission_ttl_seconds": 300, "redirect_url": "https://shop.example/x"})
        self.assertStatus(r, 201)
        for k, v in (("rate_per_minute", 120), ("max_active", 7), ("mode", "fifo"),
                     ("paused", False), ("admission_ttl_seconds", 300)):
            self.assertEqual(r.json[k], v, r)
        for k in ("queue_size", "admitted_total", "active", "watermark", "joins_per_second",
                  "admissions_per_second", "eta_last_seconds"):
            self.assertIn(k, r.json["stats"], r)
        self.assertStatus(self.GS.admin("PUT", f"/admin/events/{ev}", {"rate_per_minute": 60}), 200)
        p = self.patch(ev, paused=True)
        self.assertTrue(p["paused"])
        self.assertEqual(p["rate_per_minute"], 60)
        self.assertEqual(p["mode"], "random_at_open", "PUT replaces: absent fields reset")
        lst = self.GS.admin("GET", "/admin/events")
        self.assertStatus(lst, 200)
        self.assertIn(ev, [e["event"] for e in lst.json["events"]])
        self.assertStatus(self.GS.admin("DELETE", f"/admin/events/{ev}"), 200)
        self.assertStatus(self.GS.admin("GET", f"/admin/events/{ev}"), 404, "unknown_event")
        self.assertStatus(self.GS.admin("DELETE", f"/admin/events/{ev}"), 404, "unknown_event")
        self.assertStatus(self.GS.admin("PATCH", f"/admin/events/{ev}", {"paused": False}), 404,
                          "unknown_event")

    def test_malformed_json_and_bad_settings_are_400(self):
        ev = self.new_room(rate_per_minute=60)
        raws = [b"{", b"[1,2]", b"not json", b'{"rate_per_minute": 1,}', b"\xff\xfe"]
        for raw in raws:
            for method in ("PUT", "PATCH"):
                r = self.GS.admin(method, f"/admin/events/{ev}", raw=raw)
                self.assertStatus(r, 400, "invalid_request", msg=f"{method} {raw!r}:")
        bad = [{}, {"rate_per_minute": 0}, {"rate_per_minute": "6000"},
               {"rate_per_minute": 10, "max_active": -1}, {"rate_per_minute": 10, "paused": "no"},
               {"rate_per_minute": 10, "mode": "lottery"},
               {"rate_per_minute": 10, "opens_at": "soon"},
               {"rate_per_minute": 10, "admission_ttl_seconds": 0},
               {"rate_per_minute": 10, "redirect_url": "javascript:alert(1)"},
               {"rate_per_minute": 10, "opens_at": "2030-01-01T10:00:00Z",
                "closes_at": "2030-01-01T09:00:00Z"},
               {"rate_per_minute": 10, "prequeue_at": "2030-01-01T10:00:00Z"},
               {"rate_per_minute": 10, "opens_at": "2030-01-01T10:00:00Z",
                "prequeue_at": "2030-01-01T11:00:00Z"}]
        for body in bad:
            r = self.GS.admin("PUT", f"/admin/events/{ev}", body)
            self.assertStatus(r, 400, "invalid_request", msg=f"PUT {body}:")
        # cross-field check against the stored settings on PATCH
        self.patch(ev, opens_at="2030-01-01T10:00:00Z")
        r = self.GS.admin("PATCH", f"/admin/events/{ev}", {"closes_at": "2029-01-01T00:00:00Z"})
        self.assertStatus(r, 400, "invalid_request")
        self.assertStatus(self.GS.admin("PUT", "/admin/events/bad%20id", {"rate_per_minute": 1}),
                          400, "invalid_request")
        r = self.GS.admin("GET", f"/admin/events/{ev}")
        self.assertEqual(r.json["rate_per_minute"], 60, "a refused write changed the room")


class Handoff(gwstack.GatewayTestCase):
    """docs/api.md v1.1: the admission token reaches redirect_url in the URL fragment (default)
    or by an auto-submitting POST, never in a query string; redirect_url must be https
    (these gateways do not set allow_loopback_http)."""

    def admitted(self, ev, ticket, timeout=20):
        def poll():
            r = self.status(ev, ticket)
            return r if r.status == 200 and r.json.get("state") == "admitted" else None
        return stack.wait_for(poll, timeout, interval=0.1, what="admission")

    def test_redirect_url_must_be_https(self):
        ev = self.new_room(rate_per_minute=60)
        for url in ("http://shop.example/checkout", "http://127.0.0.1:8080/shop",
                    "http://localhost/shop", "https://user:pw@shop.example/",
                    "https://shop.example/checkout#pay", "//shop.example/x", "/checkout"):
            r = self.GS.admin("PATCH", f"/admin/events/{ev}", {"redirect_url": url})
            self.assertStatus(r, 400, "invalid_request", msg=f"redirect_url {url!r}:")
            self.assertIn("https://", r.json["message"])
        r = self.GS.admin("PATCH", f"/admin/events/{ev}", {"handoff": "query"})
        self.assertStatus(r, 400, "invalid_request")
        r = self.GS.admin("GET", f"/admin/events/{ev}")
        self.assertEqual((r.json["redirect_url"], r.json["handoff"]), (None, "fragment"))

    def test_fragment_handoff_never_puts_the_token_in_a_query(self):
        ev = self.new_room(rate_per_minute=600, redirect_url="https://shop.example/buy?ev=1")
        t = self.join(ev).json["ticket"]
        a = self.admitted(ev, t)
        tok = a.json["admission_token"]
        self.assertEqual((a.json["redirect_url"], a.json["handoff"]),
                         ("https://shop.example/buy?ev=1", "fragment"))
        page = self.c.get(f"/q/{ev}", token=t)
        self.assertStatus(page, 200)
        html = page.body.decode()
        want = f"https://shop.example/buy?ev=1#admission_token={tok}"
        self.assertIn(f'content="0;url={want}"', html)
        self.assertIn(f'href="{want}"', html)
        for q in ("?admission_token", "&admission_token", "&amp;admission_token"):
            self.assertFalse(q in html, f"{q} in the page")
        self.assertIn("form-action 'none'", page.header("Content-Security-Policy"))

    def test_post_handoff_renders_a_form_to_redirect_url(self):
        ev = self.new_room(rate_per_minute=600, redirect_url="https://shop.example:8443/buy",
                           handoff="post")
        self.assertEqual(self.GS.admin("GET", f"/admin/events/{ev}").json["handoff"], "post")
        t = self.join(ev).json["ticket"]
        a = self.admitted(ev, t)
        tok = a.json["admission_token"]
        self.assertEqual(a.json["handoff"], "post")
        page = self.c.get(f"/q/{ev}", token=t)
        self.assertStatus(page, 200)
        html = page.body.decode()
        self.assertIn('<form id="handoff" method="post" action="https://shop.example:8443/buy" >',
                      html)
        self.assertIn(f'name="admission_token" value="{tok}"', html)
        self.assertFalse("url=https://shop.example" in html, "no meta refresh carries the token")
        self.assertEqual(html.count(tok), 1, "the token is in the form field only")
        csp = page.header("Content-Security-Policy")
        self.assertIn("form-action https://shop.example:8443;", csp + ";")


def _craft_ticket(secret, event, gen, num, iat, visitor):
    """A queue ticket as gw_ticket.c lays it out, signed with secret (bytes)."""
    import base64
    import hashlib
    import hmac
    import struct
    body = bytes([1]) + struct.pack(">QQQ", gen, num, iat & 0xFFFFFFFFFFFFFFFF) + bytes.fromhex(visitor)
    mac = hmac.new(secret, b"onsale-queue-ticket\0" + event.encode() + b"\0" + body,
                   hashlib.sha256).digest()
    return base64.urlsafe_b64encode(body + mac).decode().rstrip("=")


class TicketSecrets(gwstack.GatewayTestCase):
    """The ticket secret rotates like the signing keys (a list: the newest signs,
    all verify), and a ticket older than ticket_max_age_s is refused."""

    def secret_file(self, name):
        path = os.path.join(self.GS.S.state, name)
        if not os.path.exists(path):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(os.urandom(32).hex())
        return path

    def on(self, gw, ev, ticket):
        c = gw.client()
        try:
            return self.status(ev, ticket, client=c)
        finally:
            c.close()

    def test_rotation_newest_signs_all_verify(self):
        ev = self.new_room(rate_per_minute=1, paused=True)
        old = self.GS.secret_path
        new = self.secret_file("ticket-secret-2")
        t_old = self.join(ev).json["ticket"]  # g1 signs with the old secret
        both = self.GS.add_gateway("rot-both", ticket_secret_file=f"{old},{new}")
        only_new = self.GS.add_gateway("rot-new", ticket_secret_file=new)
        self.assertStatus(self.on(both, ev, t_old), 200, msg="old ticket on old+new:")
        c = both.client()
        try:
            t_new = self.join(ev, client=c).json["ticket"]  # signed with the newest
        finally:
            c.close()
        self.assertStatus(self.on(both, ev, t_new), 200)
        self.assertStatus(self.on(only_new, ev, t_new), 200)
        self.assertStatus(self.on(self.GS.g, ev, t_new), 401, "invalid_ticket",
                          msg="the newest secret signed it:")
        self.assertStatus(self.on(only_new, ev, t_old), 401, "invalid_ticket",
                          msg="a secret dropped from the list no longer verifies:")

    def test_ticket_older_than_max_age_is_refused(self):
        ev = self.new_room(rate_per_minute=1, paused=True)
        real = self.join(ev).json["ticket"]
        gen, num, _, visitor = ticket_fields(real)
        with open(self.GS.secret_path, "rb") as f:
            secret = f.read().strip()
        now = int(time.time())
        strict = self.GS.add_gateway("max-age", ticket_max_age_s=60)
        old = _craft_ticket(secret, ev, gen, num, now - 3600, visitor)
        fresh = _craft_ticket(secret, ev, gen, num, now - 5, visitor)
        future = _craft_ticket(secret, ev, gen, num, now + 3600, visitor)
        self.assertStatus(self.on(strict, ev, fresh), 200, msg="a fresh ticket:")
        self.assertStatus(self.on(strict, ev, old), 401, "invalid_ticket",
                          msg="an hour-old ticket with ticket_max_age_s=60:")
        self.assertStatus(self.on(self.GS.g, ev, old), 200,
                          msg="the same ticket within the default maximum age:")
        self.assertStatus(self.on(self.GS.g, ev, future), 401, "invalid_ticket",
                          msg="a ticket issued an hour in the future:")


class Tickets(gwstack.GatewayTestCase):
    def test_forged_altered_other_event_tickets_are_401(self):
        ev = self.new_room(rate_per_minute=1, paused=True)
        ev2 = self.new_room(rate_per_minute=1, paused=True)
        self.join(ev)
        t = self.join(ev).json["ticket"]  # number 2: there is a better place to steal
        self.assertEqual(ticket_number(t), 2)
        self.assertStatus(self.status(ev, t), 200)
        flipped = [t[:i] + ("A" if t[i] != "A" else "B") + t[i + 1:] for i in range(0, len(t) - 1, 7)]
        gen, num, iat, visitor = ticket_fields(t)
        import base64
        import struct
        raw = bytearray(gwstack.b64url_decode(t))
        raw[9:17] = struct.pack(">Q", 1)  # a better place, same MAC
        better = base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()
        forged = [better, "x" * len(t), t[:-3], t + "AA", "", "Bearer"] + flipped
        for f in forged:
            r = self.status(ev, f)
            self.assertStatus(r, 401, "invalid_ticket", msg=f"forged {f!r}:")
            r = self.c.post(f"/q/{ev}/join", token=f) if f else None
            if r is not None:
                self.assertStatus(r, 401, "invalid_ticket", msg=f"join with forged {f!r}:")
        # another event's ticket
        self.assertStatus(self.status(ev2, t), 401, "invalid_ticket")
        self.assertStatus(self.c.post(f"/q/{ev2}/join", token=t), 401, "invalid_ticket")
        # no ticket at all
        self.assertStatus(self.c.get(f"/q/{ev}/status"), 401, "invalid_ticket")

    def test_rejoin_returns_the_same_place(self):
        ev = self.new_room(rate_per_minute=1, paused=True)
        first = self.join(ev)
        t = first.json["ticket"]
        self.join(ev)  # someone else behind
        again = self.c.post(f"/q/{ev}/join", token=t)
        self.assertStatus(again, 200)
        self.assertEqual(again.json["ticket"], t)
        self.assertEqual(again.json["position"], first.json["position"])
        # the cookie works like the Bearer ticket, and carries the browser attributes
        cookie = first.header("set-cookie")
        self.assertIsNotNone(cookie)
        for attr in ("HttpOnly", "Secure", "SameSite=Lax", f"Path=/q/{ev}"):
            self.assertIn(attr, cookie)
        self.assertTrue(cookie.startswith(f"onsale_q_{ev}={t};"), cookie)
        r = self.c.post(f"/q/{ev}/join", headers={"Cookie": f"onsale_q_{ev}={t}"})
        self.assertStatus(r, 200)
        self.assertEqual(ticket_number(r.json["ticket"]), ticket_number(t))
        r = self.c.get(f"/q/{ev}/status", headers={"Cookie": f"a=b; onsale_q_{ev}={t}"})
        self.assertStatus(r, 200)
        self.assertEqual(r.json["position"], first.json["position"])
        for f in ("event", "state", "ticket", "position", "queue_size", "eta_seconds",
                  "poll_after_ms"):
            self.assertIn(f, r.json)
        self.assertEqual(r.json["state"], "queued")
        # the line is at least as long as this fan's place, even right after the join
        self.assertGreaterEqual(first.json["queue_size"], first.json["position"], first)
        self.assertGreaterEqual(r.json["queue_size"], r.json["position"], r)

    def test_ticket_of_a_deleted_and_recreated_room_is_401(self):
        ev = self.new_room(rate_per_minute=1, paused=True)
        t = self.join(ev).json["ticket"]
        self.assertStatus(self.GS.admin("DELETE", f"/admin/events/{ev}"), 200)
        r = self.GS.admin("PUT", f"/admin/events/{ev}", {"rate_per_minute": 1, "paused": True})
        self.assertStatus(r, 201)
        self.assertStatus(self.status(ev, t), 401, "invalid_ticket")


class Admission(gwstack.GatewayTestCase):
    def admitted(self, ev, ticket, timeout=10):
        def poll():
            r = self.status(ev, ticket)
            return r if r.status == 200 and r.json.get("state") == "admitted" else None
        return stack.wait_for(poll, timeout, interval=0.1, what="admission")

    def record_expiry(self, ev, token, timeout=5):
        """PEXPIRETIME of token's record, once it exists (else -2 after timeout)."""
        key = f"os:{{{ev}}}:tk:{hashlib.sha256(token.encode()).hexdigest()}"
        deadline = time.monotonic() + timeout
        while True:
            pexp = int(self.GS.redis("PEXPIRETIME", key))
            if pexp != -2 or time.monotonic() > deadline:
                return pexp
            time.sleep(0.02)

    def test_admission_jwt_verifies_against_jwks_and_reserve_accepts_it(self):
        import jwt  # python3-jwt, an independent ES256 implementation
        ev = gwstack.new_id("adm")
        seats = [{"id": f"A-{i}", "section": "A", "price": 5000} for i in range(1, 4)]
        self.GS.S.create_event(ev, seats=seats, hold_ttl_seconds=60,
                               checkout_extension_seconds=60, max_hold_seconds=300,
                               max_per_buyer=2)
        r = self.GS.admin("PUT", f"/admin/events/{ev}",
                          {"rate_per_minute": 600, "admission_ttl_seconds": 120})
        self.assertStatus(r, 201)
        j = self.join(ev)
        t = j.json["ticket"]
        before = time.time()
        a = self.admitted(ev, t)
        tok = a.json["admission_token"]
        for f in ("admission_token", "expires_at", "redirect_url"):
            self.assertIn(f, a.json)

        jwks = gwstack.jwks_keys(self.GS.g)
        hdr = jwt.get_unverified_header(tok)
        self.assertEqual(hdr["alg"], "ES256")
        self.assertEqual(hdr.get("typ"), "JWT")
        key = next(k for k in jwks["keys"] if k["kid"] == hdr["kid"])
        pub = jwt.PyJWK(key).key
        claims = jwt.decode(tok, pub, algorithms=["ES256"], audience="onsale-reserve",
                            options={"require": ["iss", "aud", "sub", "exp", "iat", "nbf", "jti"]})
        _, _, _, visitor = ticket_fields(t)
        self.assertEqual(claims["iss"], "onsale-gateway")
        self.assertEqual(claims["aud"], "onsale-reserve")
        self.assertEqual(claims["sub"], visitor)
        self.assertEqual(claims["evt"], ev)
        self.assertEqual(claims["nbf"], claims["iat"])
        self.assertEqual(claims["exp"] - claims["iat"], 120)
        self.assertLessEqual(abs(claims["iat"] - before), 5)
        with self.assertRaises(jwt.InvalidSignatureError):
            jwt.decode(tok[:-4] + ("AAAA" if tok[-4:] != "AAAA" else "BBBB"), pub,
                       algorithms=["ES256"], audience="onsale-reserve")

        # the same ticket polled again: the same admission
        for _ in range(3):
            again = self.status(ev, t)
            self.assertStatus(again, 200)
            self.assertEqual(again.json["admission_token"], tok)
        rejoin = self.c.post(f"/q/{ev}/join", token=t)
        self.assertEqual(rejoin.json["admission_token"], tok)
        # recorded once in Redis: a second gateway (no cache) signs the same claims
        g2 = self.GS.add_gateway(gwstack.new_id("g"))
        c2 = g2.client()
        # Each token handed out is recorded in the event's slot, expiring with it
        # (docs/tokens.md), so the reserve's first hold needs no signature check. A gateway
        # sends the record without waiting for it: looked for while its gateway still runs.
        try:
            other = self.status(ev, t, client=c2)
            self.assertStatus(other, 200)
            expiry = {tok: self.record_expiry(ev, tok),
                      other.json["admission_token"]:
                          self.record_expiry(ev, other.json["admission_token"])}
        finally:
            c2.close()
            g2.stop()
            self.GS.gateways.remove(g2)
        c_other = jwt.decode(other.json["admission_token"], pub, algorithms=["ES256"],
                             audience="onsale-reserve")
        # the same admission (jti, times, visitor); rid names the poll that had each gateway
        # sign it (docs/tokens.md), so it differs between the two
        self.assertEqual({k: v for k, v in c_other.items() if k != "rid"},
                         {k: v for k, v in claims.items() if k != "rid"},
                         "another gateway issued another admission")
        self.assertRegex(c_other.get("rid", ""), r"^[A-Za-z0-9._-]{1,64}$")
        for t, c in ((tok, claims), (other.json["admission_token"], c_other)):
            self.assertEqual(expiry[t], c["exp"] * 1000,
                             "token record missing or not expiring with the token")
        names = "onsale_reserve_token_records_total"
        before = stack.metric_sum(self.GS.S.metrics(), names, result="matched")

        # reserve accepts it
        rc = self.GS.S.client()
        try:
            h = rc.post(f"/v1/events/{ev}/holds", {"seats": ["A-1"]}, token=tok)
        finally:
            rc.close()
        self.assertStatus(h, 201, msg="reserve hold with the gateway's admission token:")
        self.assertEqual(stack.metric_sum(self.GS.S.metrics(), names, result="matched"),
                         before + 1, "the hold was not proven by the gateway's token record")
        st = self.GS.admin("GET", f"/admin/events/{ev}").json["stats"]
        self.assertEqual(st["admitted_total"], 1)
        self.assertGreaterEqual(st["active"], 1)


class CrossSite(gwstack.GatewayTestCase):
    def test_browsers_join_only_from_the_rooms_own_page(self):
        ev = self.new_room(rate_per_minute=600, paused=True)
        own = f"https://{stack.HOST}:{self.GS.g.port}"
        for headers in ({"Origin": "https://evil.example"},
                        {"Origin": "null"},
                        {"Origin": own.replace("https://", "http://")},
                        {"Sec-Fetch-Site": "cross-site"},
                        {"Sec-Fetch-Site": "same-site", "Origin": own},
                        {"Origin": "https://evil.example", "Sec-Fetch-Site": "same-origin"}):
            r = self.join(ev, expect=None, headers=headers)
            self.assertStatus(r, 403, "cross_site", msg=f"{headers}:")
        self.assertEqual(int(self.GS.redis("GET", f"os:{{{ev}}}:q:n") or 0), 0,
                         "a refused join queued")
        # same-origin browsers and API clients (neither header) take places
        a = self.join(ev, headers={"Origin": own, "Sec-Fetch-Site": "same-origin"})
        b = self.join(ev)
        self.assertEqual((ticket_number(a.json["ticket"]), ticket_number(b.json["ticket"])),
                         (1, 2))


class Limits(gwstack.GatewayTestCase):
    def test_per_address_join_limit_429_with_retry_after(self):
        g = self.GS.add_gateway(gwstack.new_id("lim"), join_rate_per_ip=6, join_burst_per_ip=3)
        try:
            ev = self.new_room(rate_per_minute=1, paused=True)
            c = g.client()
            try:
                codes = [c.post(f"/q/{ev}/join") for _ in range(5)]
                self.assertEqual([r.status for r in codes[:3]], [201] * 3, codes)
                r = codes[3]
                self.assertStatus(r, 429, "rate_limited")
                self.assertGreaterEqual(int(r.header("retry-after")), 1)
                # a fan with a ticket is never limited: rejoin answers from the ticket
                self.assertStatus(c.post(f"/q/{ev}/join", token=codes[0].json["ticket"]), 200)
            finally:
                c.close()
        finally:
            g.stop()
            self.GS.gateways.remove(g)

    def test_sold_out_and_closed_are_410(self):
        ev = self.new_room(rate_per_minute=60, paused=True)
        t = self.join(ev).json["ticket"]
        self.patch(ev, sold_out=True)
        self.assertStatus(self.c.post(f"/q/{ev}/join"), 410, "sold_out")
        stack.wait_for(lambda: self.status(ev, t).status == 410, 2, what="status 410 sold_out")
        self.assertStatus(self.status(ev, t), 410, "sold_out")
        now = time.time()
        ev2 = self.new_room(rate_per_minute=60, opens_at=gwstack.rfc3339(now - 60),
                            closes_at=gwstack.rfc3339(now - 1))
        self.assertStatus(self.c.post(f"/q/{ev2}/join"), 410, "closed")

    def test_body_too_large(self):
        ev = self.new_room(rate_per_minute=60)
        big = json.dumps({"rate_per_minute": 1, "pad": "x" * 40000}).encode()
        r = self.GS.admin("PUT", f"/admin/events/{ev}", raw=big)
        self.assertStatus(r, 413, "body_too_large")


class Page(gwstack.GatewayTestCase):
    """The queue page route (the page itself is tested in a browser elsewhere): a visit
    shows the page and takes no place (a link or an image on another site cannot make
    browsers queue); the page joins by a same-origin POST, and later visits make the same
    decisions as a status poll, from the cookie."""

    def test_page_takes_no_place_and_follows_the_cookie(self):
        ev = self.new_room(rate_per_minute=600, paused=True)
        r = self.c.get(f"/q/{ev}")
        self.assertStatus(r, 200)
        self.assertTrue(r.header("content-type").startswith("text/html"), r)
        self.assertIsNone(r.header("set-cookie"), "a GET took a place")
        self.assertIn(f'action="/q/{ev}/join"'.encode(), r.body, "no join form without JavaScript")
        # the page's form: a same-origin POST, answered 303 back to the page with the cookie
        # (Origin null: the page's Referrer-Policy is no-referrer)
        form = self.c.post(f"/q/{ev}/join", raw=b"", headers={
            "Content-Type": "application/x-www-form-urlencoded",
            "Origin": "null", "Sec-Fetch-Site": "same-origin"})
        self.assertStatus(form, 303)
        self.assertEqual(form.header("location"), f"/q/{ev}")
        cookie = form.header("set-cookie")
        self.assertTrue(cookie and cookie.startswith(f"onsale_q_{ev}="), cookie)
        t = cookie.split(";", 1)[0].split("=", 1)[1]
        self.assertEqual(ticket_number(t), 1)
        hdr = {"Cookie": f"onsale_q_{ev}={t}"}
        again = self.c.get(f"/q/{ev}", headers=hdr)  # a reload keeps the place
        self.assertStatus(again, 200)
        self.assertEqual(ticket_number(again.header("set-cookie").split(";", 1)[0]
                                       .split("=", 1)[1]), 1)
        self.assertEqual(self.join(ev).json["position"], 2)
        self.patch(ev, paused=False)

        def admitted():
            s = self.status(ev, t)
            return s.json.get("admission_token") if s.status == 200 else None
        tok = stack.wait_for(admitted, 10, interval=0.1, what="admission")
        p = self.c.get(f"/q/{ev}", headers=hdr)
        self.assertStatus(p, 200)
        self.assertIn(tok.encode(), p.body, "the page does not carry the same admission")
        # a forged cookie is simply a new visitor, who takes no place by looking
        f = self.c.get(f"/q/{ev}", headers={"Cookie": f"onsale_q_{ev}=forged"})
        self.assertStatus(f, 200)
        self.assertIsNone(f.header("set-cookie"))
        self.assertEqual(ticket_number(self.join(ev).json["ticket"]), 3)
        ev2 = self.new_room(rate_per_minute=1, paused=True, sold_out=True)
        s2 = self.c.get(f"/q/{ev2}")
        self.assertStatus(s2, 200)
        self.assertIsNone(s2.header("set-cookie"), "a sold-out room handed out a place")
        self.assertIn(b'data-state="sold_out"', s2.body)
        # An unknown room is a 404 page for the browser, not a JSON error body.
        nr = self.c.get("/q/no-such-room")
        self.assertEqual(nr.status, 404, nr)
        self.assertTrue(nr.header("content-type").startswith("text/html"), nr)
        d = self.a.get("/admin/")
        self.assertStatus(d, 200)
        self.assertTrue(d.header("content-type").startswith("text/html"), d)
