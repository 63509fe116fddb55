"""Hostile and broken input: malformed JSON, wrong types, bad identifiers, an oversized
body, slow clients. Never a crash or a hang; the service keeps serving others."""

import os
import subprocess
import time
import urllib.parse

import stack


def setUpModule():
    stack.module_stack("input")


SEATS = [{"id": f"A-{i}", "section": "A", "price": 12000} for i in range(1, 5)]
POOLS = [{"id": "floor", "capacity": 10, "price": 6000}]


class BadInput(stack.ReserveTestCase):
    def setUp(self):
        super().setUp()
        self.ev = self.new_event(seats=SEATS, pools=POOLS, max_per_buyer=0)
        self.tok = self.S.token(self.ev, "fuzzer")
        self.path = f"/v1/events/{self.ev}/holds"

    def post_raw(self, raw, path=None, token=None):
        return self.c.post(path or self.path, raw=raw, token=token or self.tok)

    def check_all(self, cases, status, error):
        failures = []
        for name, r in cases:
            if (r.status, r.err) != (status, error) or not isinstance(
                    (r.json or {}).get("message"), str):
                failures.append(f"{name}: expected {status} {error} with a message, got {r!r}")
        self.assertEqual(failures, [], "\n".join(failures))

    def assert_all_free(self):
        other = self.S.token(self.ev, "checker")
        self.hold(self.ev, other, seats=[s["id"] for s in SEATS])

    def test_malformed_json_and_wrong_types_are_400(self):
        raws = {
            "truncated JSON": b'{"seats":["A-1"',
            "not JSON": b"seats=A-1",
            "empty body": b"",
            "JSON null": b"null",
            "JSON array": b'["A-1"]',
            "JSON string": b'"A-1"',
            "trailing garbage": b'{"seats":["A-1"]} x',
            "invalid UTF-8": b'{"seats":["A-\xff"]}',
        }
        bodies = {
            "seats as string": {"seats": "A-1"},
            "seats as object": {"seats": {"A-1": True}},
            "seat as number": {"seats": [1]},
            "seat as null": {"seats": [None]},
            "quantity as string": {"pool": "floor", "quantity": "2"},
            "quantity as float": {"pool": "floor", "quantity": 1.5},
            "quantity as bool": {"pool": "floor", "quantity": True},
            "quantity 0": {"pool": "floor", "quantity": 0},
            "quantity -1": {"pool": "floor", "quantity": -1},
            "pool without quantity": {"pool": "floor"},
            "pool as number": {"pool": 7, "quantity": 1},
            "both seats and pool": {"seats": ["A-1"], "pool": "floor", "quantity": 1},
            "empty seats": {"seats": []},
            "duplicate seats": {"seats": ["A-1", "A-1"]},
            "neither seats nor pool": {"quantity": 1},
            "empty object": {},
        }
        cases = [(n, self.post_raw(b)) for n, b in raws.items()]
        cases += [(n, self.c.post(self.path, b, token=self.tok)) for n, b in bodies.items()]
        self.check_all(cases, 400, "invalid_request")
        self.assert_all_free()

    def test_unknown_seat_pool_event_are_404(self):
        r = self.c.post(self.path, {"seats": ["A-1", "Z-99"]}, token=self.tok)
        self.assertStatus(r, 404, "unknown_seat")
        r = self.c.post(self.path, {"pool": "balcony", "quantity": 1}, token=self.tok)
        self.assertStatus(r, 404, "unknown_pool")
        ghost = stack.new_id("ghost")
        r = self.c.post(f"/v1/events/{ghost}/holds", {"seats": ["A-1"]},
                        token=self.S.token(ghost, "fan"))
        self.assertStatus(r, 404, "unknown_event")
        self.assertStatus(self.c.get(f"/v1/events/{ghost}/availability"), 404, "unknown_event")
        self.assertStatus(self.c.get(f"/v1/events/{ghost}/seats"), 404, "unknown_event")
        self.assert_all_free()   # A-1 was not half-held by the unknown_seat request

    def test_unknown_fields_are_ignored(self):
        r = self.c.post(self.path, {"seats": ["A-2"], "comment": "hi", "x": [1, {"y": None}]},
                        token=self.tok)
        self.assertStatus(r, 201)

    def test_bad_identifiers_in_body_are_400(self):
        bad = ["A" * 65, "a/b", "é", "A 1", "", "A-1\u0000", "../A-1", "A-1;DROP"]
        cases = [(f"seat {b!r}", self.c.post(self.path, {"seats": [b]}, token=self.tok))
                 for b in bad]
        cases += [(f"pool {b!r}", self.c.post(self.path, {"pool": b, "quantity": 1},
                                              token=self.tok)) for b in bad]
        # 64 characters is still a well-formed identifier (just an unknown one).
        r = self.c.post(self.path, {"seats": ["A" * 64]}, token=self.tok)
        self.assertStatus(r, 404, "unknown_seat", msg="64-character seat id:")
        self.check_all(cases, 400, "invalid_request")

    def test_bad_identifiers_in_path_are_400_or_404(self):
        failures = []
        for bad in ["e" * 65, "a/b", "év", "a b", "a\u0000b"]:
            enc = urllib.parse.quote(bad, safe="")
            tok = self.S.sign(dict(self.S.claims(self.ev, "fuzzer"), evt=bad))
            for method, path, t in (("POST", f"/v1/events/{enc}/holds", tok),
                                    ("GET", f"/v1/events/{enc}/availability", None),
                                    ("GET", f"/v1/events/{enc}/seats", None),
                                    ("GET", f"/v1/holds/{enc}", self.tok),
                                    ("POST", f"/v1/holds/{enc}/extend", self.tok),
                                    ("DELETE", f"/v1/holds/{enc}", self.tok)):
                body = {"seats": ["A-1"]} if path.endswith("/holds") else None
                r = self.c.request(method, path, body=body, token=t)
                if r.status not in (400, 404) or not isinstance(r.json, dict) or not r.err:
                    failures.append(f"{method} {path}: expected 400 or 404 with a JSON "
                                    f"error, got {r!r}")
        self.assertEqual(failures, [], "\n".join(failures))

    def test_10mb_body_is_413(self):
        r = self.S.oversized(self.path, self.tok, 10 * 1024 * 1024)
        self.assertEqual(r.status, 413, f"10 MB body: expected 413, got {r!r} after "
                         f"sending {r.sent} bytes of body")
        self.assertStatus(self.c.get("/healthz"), 200)

    def test_deeply_nested_json(self):
        r = self.post_raw(b'{"seats":' + b"[" * 5000 + b"]" * 5000 + b"}")
        self.assertIn(r.status, (400, 413), f"deeply nested JSON: {r!r}")
        self.assertStatus(self.c.get("/healthz"), 200)


class Amounts(stack.ReserveTestCase):
    """Prices are bounded so price x quantity cannot overflow (and stays
    exact below 2^53 where Lua compares it); the units text built for Postgres is sized,
    never truncated (a 64-character pool id and a 100-unit hold book every unit)."""

    def test_price_above_the_bound_is_400(self):
        for spec in ({"seats": [{"id": "A-1", "section": "A", "price": 2 ** 62}]},
                     {"sections": [{"id": "A", "rows": 1, "seats_per_row": 1,
                                    "price": 10 ** 11 + 1}]},
                     {"pools": [{"id": "fl", "capacity": 10, "price": 2 ** 61}]}):
            r = self.S.admin("PUT", f"/admin/events/{stack.new_id()}", dict(spec, currency="EUR"))
            self.assertStatus(r, 400, "invalid_request")
            self.assertIn("100000000000", r.json["message"])

    def test_largest_amount_and_longest_pool_id_book_exactly(self):
        pool = "p" * 64
        ev = self.new_event(pools=[{"id": pool, "capacity": 150, "price": 10 ** 11}],
                            max_per_buyer=100)
        t = self.S.token(ev, "whale")
        h = self.hold(ev, t, pool=pool, quantity=100).json
        self.assertEqual(h["amount"], 10 ** 13)
        r = self.confirm(h["hold_id"], t, 10 ** 13)
        self.assertStatus(r, 201)
        self.assertEqual(self.S.sql_value(
            f"select count(*) from booking_items where event_id = '{ev}'"), "100")
        self.assertEqual(self.S.sql_value(
            f"select amount from bookings where event_id = '{ev}'"), str(10 ** 13))


class SecurityHeaders(stack.ReserveTestCase):
    def test_nosniff_and_hsts_on_every_answer(self):
        """X-Content-Type-Options: nosniff and HSTS on every answer, success or
        error, whatever route produced it."""
        ev = self.new_event(seats=SEATS)
        tok = self.S.token(ev, "headers")
        answers = [self.c.get("/healthz"), self.c.get("/readyz"), self.a.get("/metrics"),
                   self.c.get("/nope"), self.c.get(f"/v1/events/{ev}/availability", token=tok),
                   self.c.post(f"/v1/events/{ev}/holds", raw=b"{", token=tok),
                   self.c.post(f"/v1/events/{ev}/holds", body={"seats": ["A-1"]}),
                   self.a.get("/admin/checkouts"),
                   self.c.request("DELETE", "/healthz")]
        statuses = set()
        for r in answers:
            statuses.add(r.status)
            self.assertEqual(r.header("X-Content-Type-Options"), "nosniff", repr(r))
            self.assertRegex(r.header("Strict-Transport-Security") or "", r"^max-age=\d{7,}",
                             repr(r))
        self.assertTrue({200, 400, 401, 404} <= statuses, statuses)


class Secrets(stack.ReserveTestCase):
    """The stack's Redis and Postgres take authenticated clients only, and the
    services refuse secret files that group or others may read."""

    def test_redis_and_postgres_refuse_anonymous_clients(self):
        anon = stack.Redis(self.S.redis_port)
        try:
            with self.assertRaisesRegex(RuntimeError, "NOAUTH"):
                anon("PING")
        finally:
            anon.close()
        wrong = stack.Redis(self.S.redis_port, auth=("onsale", "wrong-password"))
        with self.assertRaisesRegex(RuntimeError, "WRONGPASS|AUTH failed"):
            wrong("PING")
        wrong.close()
        # the default user is off, even with the right password
        dflt = stack.Redis(self.S.redis_port, auth=("default", self.S.redis_auth[1]))
        with self.assertRaisesRegex(RuntimeError, "WRONGPASS|AUTH failed"):
            dflt("PING")
        dflt.close()
        self.assertEqual(self.S.redis("PING"), "PONG")
        for user in ("onsale", "postgres"):
            p = subprocess.run(["psql", "-h", stack.HOST, "-p", str(self.S.pg_port), "-U", user,
                                "-X", "-w", "onsale", "-Atc", "SELECT 1"], capture_output=True,
                               timeout=30, env=dict(os.environ, PGPASSWORD="", PGPASSFILE="/nonexistent"))
            self.assertNotEqual(p.returncode, 0, f"{user} got in without a password")
        # the cluster topology (deploy/lib/pg_cluster.sh): pg_autoctl reaches its own
        # Postgres as postgres by peer on the socket, and the monitor's health checks and
        # replication come from the loopback without a password; every other rule wants one
        hba = os.path.join("pgha", "pg-1") if self.S.cluster else "pg"
        internal = ("pgautofailover_monitor", "pgautofailover_replicator")
        with open(os.path.join(self.S.state, hba, "pg_hba.conf")) as f:
            rules = [ln.split() for ln in f if ln.strip() and not ln.lstrip().startswith("#")]
        if self.S.cluster:
            rules = [r for r in rules if r[2] not in internal
                     and not (r[0] == "local" and r[2] == "postgres" and r[-1] == "peer")]
        self.assertTrue(rules)
        self.assertEqual({r[-1] for r in rules}, {"scram-sha-256"}, rules)
        for name in ("redis-password", "pg-password", "admin-token"):
            mode = os.stat(os.path.join(self.S.state, name)).st_mode & 0o777
            self.assertEqual(mode, 0o600, name)

    def test_secret_file_readable_by_others_is_refused_at_start(self):
        loose = os.path.join(self.S.root, "loose-token")
        with open(os.path.join(self.S.state, "admin-token")) as f, open(loose, "w") as g:
            g.write(f.read())
        os.chmod(loose, 0o644)
        conf = os.path.join(self.S.state, f"{self.S.reserve_names[0]}.conf")
        for key in ("admin_token_file", "redis_password_file", "pg_password_file"):
            p = subprocess.run([self.S.reserve_bin, "--config", conf, f"--{key}={loose}",
                                "--port=0"], capture_output=True, timeout=60,
                               stdin=subprocess.DEVNULL)
            out = (p.stdout + p.stderr).decode()
            self.assertNotEqual(p.returncode, 0, f"{key}: started with a 0644 secret file")
            self.assertIn(key, out)
            self.assertIn("chmod 600", out)

    def test_private_key_files_readable_by_others_are_refused_at_start(self):
        """TLS private keys (both services) and the gateway's signing keys are secrets too:
        a copy readable by group or others stops the service at start, the message naming
        the key, the file and its mode."""
        gateway_bin = os.path.join(self.S.build, "gateway", "onsale-gateway")
        cases = (  # binary, config file, key, the state's file it copies
            (self.S.reserve_bin, self.S.reserve_names[0], "tls_key", "server-key.pem"),
            (gateway_bin, self.S.gateway_names[0], "tls_key", "server-key.pem"),
            (gateway_bin, self.S.gateway_names[0], "signing_keys",
             os.path.join("keys", "admission-1.pem")),
        )
        for binary, conf, key, src in cases:
            for mode in (0o640, 0o604):
                loose = os.path.join(self.S.root, f"loose-{key}-{oct(mode)[2:]}.pem")
                with open(os.path.join(self.S.state, src), "rb") as f, open(loose, "wb") as g:
                    g.write(f.read())
                os.chmod(loose, mode)
                p = subprocess.run([binary, "--config", os.path.join(self.S.state, f"{conf}.conf"),
                                    f"--{key}={loose}", "--port=0"], capture_output=True,
                                   timeout=60, stdin=subprocess.DEVNULL)
                out = (p.stdout + p.stderr).decode()
                what = f"{os.path.basename(binary)} {key} mode {oct(mode)}"
                self.assertNotEqual(p.returncode, 0, f"{what}: started")
                self.assertIn(key, out, what)
                self.assertIn(loose, out, what)
                self.assertIn(f"mode {mode:04o}", out, what)
                self.assertIn("chmod 600", out, what)
        # what the stack itself made is owner-only
        for name in ("server-key.pem", "ca-key.pem", os.path.join("keys", "admission-1.pem")):
            mode = os.stat(os.path.join(self.S.state, name)).st_mode & 0o777
            self.assertEqual(mode, 0o600, name)


class SlowClients(stack.ReserveTestCase):
    def test_slowloris_does_not_block_others(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=0)
        tok = self.S.token(ev, "patient")
        slow = []
        try:
            for _ in range(16):     # TLS up, half a request header, then silence
                s = self.S.raw_tls()
                s.sendall(f"POST /v1/events/{ev}/holds HTTP/1.1\r\nHost: x\r\n"
                          f"Authorization: Bearer {tok[:20]}".encode())
                slow.append(s)
            for _ in range(4):      # headers complete, body promised but not sent
                s = self.S.raw_tls()
                s.sendall(f"POST /v1/events/{ev}/holds HTTP/1.1\r\nHost: x\r\n"
                          f"Authorization: Bearer {tok}\r\nContent-Length: 100\r\n\r\n"
                          f'{{"seats":'.encode())
                slow.append(s)
            for _ in range(4):      # TLS up, nothing sent
                slow.append(self.S.raw_tls())
            for _ in range(4):      # TCP only, no TLS handshake
                slow.append(self.S.raw_tls(handshake=False))
            for _ in range(2):      # half a TLS ClientHello
                s = self.S.raw_tls(handshake=False)
                s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
                slow.append(s)

            # Others are served meanwhile (a blocked server would time these out).
            quick = self.S.client(timeout=5)
            try:
                for _ in range(3):
                    self.assertStatus(quick.get("/healthz"), 200)
                    self.assertStatus(quick.get(f"/v1/events/{ev}/availability"), 200)
                    time.sleep(0.5)
                r = quick.post(f"/v1/events/{ev}/holds", {"seats": ["A-1"]}, token=tok)
                self.assertStatus(r, 201, msg="hold while slow clients hang:")
                fresh = self.S.client(timeout=5)
                self.assertStatus(fresh.get("/healthz"), 200, msg="new connection:")
                fresh.close()
            finally:
                quick.close()
        finally:
            for s in slow:
                s.close()


class ZzAfterAbuse(stack.ReserveTestCase):
    """Runs last in this module (unittest orders classes by name)."""

    def test_still_healthy_and_serving(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=0)
        self.assertStatus(self.c.get("/healthz"), 200)
        self.assertEqual(self.c.get("/healthz").json, {"status": "ok"})
        self.hold(ev, self.S.token(ev, "normal"), seats=["A-1"])
