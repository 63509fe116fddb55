"""What an abusive client can make the reserve spend on tokens, and keys and
certificates replaced without a restart: forged tokens with a valid kid are limited per
address (429 + Retry-After), the verification queue is bounded (503 + Retry-After), the
admission keys and the TLS certificate are re-read on SIGHUP, and TLS session tickets are
off. The reserve of this module runs with small limits (set through its environment)."""

import os
import signal
import socket
import ssl
import subprocess
import tempfile
import unittest

import stack

FAIL_LIMIT = 5
FAIL_WINDOW = 10  # long enough for slow (sanitizer) builds to send FAIL_LIMIT + 1
ENV = {
    "ONSALE_RESERVE_AUTH_FAIL_LIMIT": str(FAIL_LIMIT),
    "ONSALE_RESERVE_AUTH_FAIL_WINDOW_S": str(FAIL_WINDOW),
    "ONSALE_RESERVE_VERIFY_THREADS": "1",
    "ONSALE_RESERVE_VERIFY_MAX_QUEUE": "1",
    # token records off (docs/tokens.md): every new token costs a verification here
    "ONSALE_RESERVE_TOKEN_RECORDS": "false",
}


def setUpModule():
    with stack.env_set(ENV):
        stack.module_stack("authlim")


SEATS = [{"id": f"A-{i}", "section": "A", "price": 12000} for i in range(1, 5)]


def forged(S, ev, sub):
    """A token with the real kid and a signature by another key: a full verification."""
    from cryptography.hazmat.primitives.asymmetric import ec
    return S.sign(S.claims(ev, sub), key=ec.generate_private_key(ec.SECP256R1()))


def sighup_reserves(S):
    """Every reserve of the stack (two behind HAProxy in the cluster topology)."""
    for pid in S.pids(S.reserve_names):
        os.kill(pid, signal.SIGHUP)


def sighup_and_wait(S, what, fn, timeout=10):
    sighup_reserves(S)
    stack.wait_for(fn, timeout, interval=0.1, what=what)


def served_cert(S):
    """The DER certificate a new TLS connection to the reserve presents."""
    ctx = ssl.create_default_context(cafile=S.ca)
    with socket.create_connection((stack.HOST, S.reserve_port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname=stack.HOST) as tls:
            return tls.getpeercert(binary_form=True)


class AuthLimits(stack.ReserveTestCase):
    def test_forged_tokens_from_one_address_get_429_after_the_limit(self):
        ev = self.new_event(seats=SEATS)
        path = f"/v1/events/{ev}/holds"
        toks = [forged(self.S, ev, f"m{i}") for i in range(FAIL_LIMIT + 1)]
        honest = self.S.token(ev, "honest")
        for i in range(FAIL_LIMIT):
            r = self.c.post(path, {"seats": ["A-1"]}, token=toks[i])
            self.assertStatus(r, 401, "invalid_token", msg=f"forged token {i + 1}:")
        r = self.c.post(path, {"seats": ["A-1"]}, token=toks[FAIL_LIMIT])
        self.assertStatus(r, 429, "rate_limited", msg="forged token past the limit:")
        self.assertEqual(r.header("Retry-After"), str(FAIL_WINDOW), repr(r))
        # Past the limit even a new valid token is not verified for this address …
        self.assertStatus(self.c.post(path, {"seats": ["A-1"]}, token=honest), 429,
                          "rate_limited")
        # … and the limit ends with its window.
        stack.wait_for(lambda: self.c.post(path, {"seats": ["A-1"]}, token=honest).status == 201,
                       FAIL_WINDOW + 5, interval=0.25, what="hold after the window")

    @unittest.skipIf(stack.topology() == "cluster",
                     "one reserve process by nature: behind HAProxy the connections also "
                     "spread over two reserves, each with its own table (the limit is per "
                     "process: fail_limit × reserves in all, docs/operations.md)")
    def test_the_limit_is_per_process_not_per_worker(self):
        """Forged tokens from one address, each on a new connection: the kernel spreads the
        connections over the reserve's two workers (SO_REUSEPORT), yet the 429 comes after
        fail_limit failures in all, not after fail_limit on each worker (2 × the limit)."""
        import http.client
        ev = self.new_event(seats=SEATS)
        path = f"/v1/events/{ev}/holds"
        src = "127.0.0.9"  # an address of its own: the other tests' failures do not count

        def post_once(tok):
            conn = http.client.HTTPSConnection(stack.HOST, self.S.reserve_port,
                                               context=self.S.ctx, timeout=stack.HTTP_TIMEOUT,
                                               source_address=(src, 0))
            try:
                conn.request("POST", path, body=b'{"seats": ["A-1"]}',
                             headers={"Authorization": f"Bearer {tok}",
                                      "Content-Type": "application/json"})
                resp = conn.getresponse()
                return resp.status
            finally:
                conn.close()

        statuses = [post_once(forged(self.S, ev, f"w{i}")) for i in range(2 * FAIL_LIMIT)]
        self.assertEqual(statuses, [401] * FAIL_LIMIT + [429] * FAIL_LIMIT,
                         "each on a new connection, spread over both workers")

    def test_a_full_verification_queue_answers_503_with_retry_after(self):
        ev = self.new_event(seats=SEATS)
        toks = self.S.tokens(ev, "crowd", 300)
        # GET of an unknown checkout: the token is checked first, then Postgres says 404.
        reqs = [self.S.req("GET", "/v1/checkouts/00000000-0000-0000-0000-000000000000",
                           token=t) for t in toks]
        resps = self.S.burst(reqs)
        statuses = sorted({r.status for r in resps}, key=str)
        busy = [r for r in resps if r.status == 503]
        self.assertTrue(busy, f"no 503 from 300 new tokens and a 1-deep queue: {statuses}")
        self.assertTrue(all(r.status in (404, 503) for r in resps), f"statuses: {statuses}")
        self.assertEqual({r.header("Retry-After") for r in busy}, {"1"})
        self.assertEqual({r.err for r in busy}, {"unavailable"})
        # The refused fans retry and get through: one at a time the 1-deep queue is never
        # full, so each is verified and reaches Postgres (404: no such checkout).
        refused = [i for i, r in enumerate(resps) if r.status == 503][:20]
        for i in refused:
            r = self.c.get(resps[i].path, token=toks[i])
            self.assertStatus(r, 404, msg=f"fan {i} retrying after its 503:")

    def test_token_records_off_verifies_every_new_token(self):
        import hashlib
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        real = self.S.token(ev, "records-off")
        h, p, _ = real.split(".")
        forged = ".".join([h, p, stack.b64url(b"\x01" * 64)])
        for t in (real, forged):  # even the forged bytes recorded, as if by a gateway
            key = f"os:{{{ev}}}:tk:{hashlib.sha256(t.encode()).hexdigest()}"
            self.S.redis("SET", key, "1", "PX", "600000")
        names = "onsale_reserve_token_records_total"
        before = stack.metric_sum(self.S.metrics(), names)
        r = self.c.post(f"/v1/events/{ev}/holds", {"seats": ["A-1"]}, token=forged)
        self.assertStatus(r, 401, "invalid_token", msg="recorded forged token, records off:")
        self.hold(ev, real, seats=["A-1"])
        self.assertEqual(stack.metric_sum(self.S.metrics(), names), before,
                         "a token was judged by its record with token_records = false")

    def test_sighup_reloads_the_admission_keys(self):
        from cryptography.hazmat.primitives.asymmetric import ec
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        new_key = ec.generate_private_key(ec.SECP256R1())
        old_tok = self.S.token(ev, "old-key-fan")
        self.hold(ev, old_tok, seats=["A-1"])  # verified and cached under the old key
        new_tok = self.S.sign(self.S.claims(ev, "new-key-fan"), key=new_key,
                              headers={"kid": "rotated-2"})
        path = f"/v1/events/{ev}/holds"
        self.assertStatus(self.c.post(path, {"seats": ["A-2"]}, token=new_tok), 401,
                          "invalid_token", msg="unknown key before the reload:")
        with open(self.S.pub_path, "rb") as f:
            original = f.read()

        def put_keys(data):
            tmp = self.S.pub_path + ".tmp"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, self.S.pub_path)

        self.addCleanup(lambda: (put_keys(original),
                                 sighup_reserves(self.S)))
        # The new key alone (a JWKS document with its kid): the old key is dropped.
        jwk = {"kty": "EC", "crv": "P-256", "kid": "rotated-2",
               "x": stack.b64url(new_key.public_key().public_numbers().x.to_bytes(32, "big")),
               "y": stack.b64url(new_key.public_key().public_numbers().y.to_bytes(32, "big"))}
        import json
        put_keys(json.dumps({"keys": [jwk]}).encode())
        sighup_and_wait(self.S, "the new key accepted",
                        lambda: self.c.get(f"/v1/events/{ev}/availability").status == 200 and
                        self.c.post(path, {"seats": ["A-2"]}, token=new_tok).status == 201)
        # The old key is gone: even its cached token is refused now.
        self.assertStatus(self.c.post(path, {"seats": ["A-3"]}, token=old_tok), 401,
                          "invalid_token", msg="old key after the reload:")
        # A broken file keeps the keys that work (the reload is logged as refused).
        logs = [os.path.join(self.S.state, "log", f"{n}.log") for n in self.S.reserve_names]
        kept = "admission keys kept as it was"

        def logged():  # the fewest refusals any reserve logged
            counts = []
            for log in logs:
                with open(log, errors="replace") as f:
                    counts.append(f.read().count(kept))
            return min(counts)

        n0 = logged()
        put_keys(b"not a key\n")
        sighup_reserves(self.S)
        stack.wait_for(lambda: logged() > n0, 10,
                       what="the refused reload logged")
        fresh = self.S.sign(self.S.claims(ev, "new-key-fan-2"), key=new_key,
                            headers={"kid": "rotated-2"})
        self.hold(ev, fresh, seats=["A-4"])

    def test_sighup_reloads_the_certificate_and_tickets_are_off(self):
        before = served_cert(self.S)
        cert, key = os.path.join(self.S.state, "server.pem"), os.path.join(self.S.state,
                                                                            "server-key.pem")
        saved = {}
        for p in (cert, key):
            with open(p, "rb") as f:
                saved[p] = f.read()

        def restore():
            for p, data in saved.items():
                with open(p, "wb") as f:
                    f.write(data)
            sighup_reserves(self.S)
            stack.wait_for(lambda: served_cert(self.S) == before, 10, what="old cert back")

        self.addCleanup(restore)
        with tempfile.TemporaryDirectory() as d:
            cnf = os.path.join(d, "ext.cnf")
            with open(cnf, "w") as f:
                f.write("subjectAltName = IP:127.0.0.1,DNS:localhost\n"
                        "extendedKeyUsage = serverAuth\n")
            run = lambda *a: subprocess.run(a, check=True, capture_output=True, timeout=30)
            run("openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout",
                "-out", os.path.join(d, "k.pem"))
            run("openssl", "req", "-new", "-key", os.path.join(d, "k.pem"), "-subj",
                "/CN=localhost reloaded", "-out", os.path.join(d, "c.csr"))
            run("openssl", "x509", "-req", "-in", os.path.join(d, "c.csr"), "-CA", self.S.ca,
                "-CAkey", os.path.join(self.S.state, "ca-key.pem"), "-set_serial", "7",
                "-days", "2", "-extfile", cnf, "-out", os.path.join(d, "c.pem"))
            # key first would not matter: a mismatched pair is refused and the old one kept
            for src, dst in (("k.pem", key), ("c.pem", cert)):
                with open(os.path.join(d, src), "rb") as f, open(dst, "wb") as g:
                    g.write(f.read())
        sighup_and_wait(self.S, "the new certificate served",
                        lambda: served_cert(self.S) != before)
        # Connections made now verify against the same CA and work end to end.
        c = self.S.client()
        self.addCleanup(c.close)
        self.assertStatus(c.get("/readyz"), 200)

        # No session tickets (common/cm_tls.h says why): none issued on TLS 1.2, where a
        # ticket is the only stateless resumption there is.
        ctx = ssl.create_default_context(cafile=self.S.ca)
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        with socket.create_connection((stack.HOST, self.S.reserve_port), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname=stack.HOST) as tls:
                self.assertFalse(tls.session.has_ticket, "the server issued a session ticket")
