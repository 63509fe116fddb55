"""The reserve's payment-provider client (reserve/rsv_pay.c, libcurl's multi interface on
the worker's loop; issue 9 "Confirmations"):

- a provider named by a host name (https://localhost:<port>) works — resolved off the
  loop, its certificate checked against the configured CA for that name;
- confirmations in a row reuse a small number of kept-alive TLS connections (counted by
  the simulator's GET /v1/stats: requests against completed TLS handshakes);
- a provider that completes TLS, reads the request and never answers: the call's deadline
  passes → 202 pending, and the same single-worker reserve keeps answering other requests
  meanwhile (its loop is not blocked).

Each test runs its own reserve process (test_saga_crash.Reserves) on the stack's config
with the provider URL under test.
"""

import os
import socket
import ssl
import threading
import time
import uuid

from test_saga_crash import Reserves
from test_saga_flows import PAY_TIMEOUT_MS, SagaCase, payment, saga_stack

SEATS = [{"id": f"P-{i}", "section": "P", "price": 3000} for i in range(1, 60)]


def setUpModule():
    saga_stack("saga-provider")


class Silent:
    """A TLS server (the stack's certificate) that reads requests and never answers."""

    def __init__(self, state):
        self.ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ctx.load_cert_chain(os.path.join(state, "server.pem"),
                                 os.path.join(state, "server-key.pem"))
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self.requests = 0
        self.stop = False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        self.sock.settimeout(0.2)
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            try:
                c.settimeout(5)
                t = self.ctx.wrap_socket(c, server_side=True)
                if t.recv(4096):
                    self.requests += 1
                self.conns.append(t)  # held open, never answered
            except (OSError, ssl.SSLError):
                c.close()

    def close(self):
        self.stop = True
        self.t.join(timeout=5)
        for c in self.conns:
            c.close()
        self.sock.close()


class Provider(SagaCase):
    def setUp(self):
        super().setUp()
        self.r = Reserves(self.S)
        self.addCleanup(self.r.stop_all)

    def stats(self):
        st, doc = self.pay.request("GET", "/v1/stats")
        self.assertEqual(st, 200, doc)
        return doc

    def confirm_on(self, p, ev, sub, seat, source="tok_visa", timeout=10):
        c = self.r.client(p, timeout=timeout)
        try:
            t = self.S.token(ev, sub)
            r = c.post(f"/v1/events/{ev}/holds", {"seats": [seat]}, token=t)
            self.assertStatus(r, 201, msg="hold:")
            h = r.json
            return c.post(f"/v1/holds/{h['hold_id']}/confirm", payment(h["amount"], source),
                          token=t, headers={"Idempotency-Key": uuid.uuid4().hex})
        finally:
            c.close()

    def test_provider_named_by_a_host_name_works(self):
        p = self.r.start({"ONSALE_RESERVE_PAYSIM_URL": f"https://localhost:{self.S.paysim_port}"})
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        r = self.confirm_on(p, ev, "byname", "P-1")
        self.assertStatus(r, 201)
        self.assertEqual(r.json["state"], "confirmed")
        self.assertEqual(self.audit_event(ev), {r.json["checkout_id"]: "charged+booked"})

    def test_confirmations_reuse_a_few_kept_alive_tls_connections(self):
        n = 20
        p = self.r.start({"ONSALE_RESERVE_WORKERS": "1"})
        ev = self.new_event(seats=SEATS, max_per_buyer=n)
        before = self.stats()
        for i in range(n):
            r = self.confirm_on(p, ev, "reuse", f"P-{i + 1}")
            self.assertStatus(r, 201)
        after = self.stats()
        calls = after["requests"] - before["requests"]
        handshakes = after["tls_handshakes"] - before["tls_handshakes"]
        self.assertGreaterEqual(calls, n)
        # One connection carries them all; the stack's own reserve (its reconciler and
        # ledger walk) and our stats requests may add a few of their own.
        self.assertLessEqual(handshakes, 6, f"{handshakes} TLS handshakes for {calls} calls")
        self.assertEqual(set(self.audit_event(ev).values()), {"charged+booked"})

    def test_a_provider_that_never_answers_gives_202_and_the_loop_keeps_serving(self):
        silent = Silent(self.S.state)
        self.addCleanup(silent.close)
        p = self.r.start({"ONSALE_RESERVE_WORKERS": "1",
                          "ONSALE_RESERVE_PAYSIM_URL": f"https://localhost:{silent.port}"})
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        out = {}

        def confirm():
            out["r"] = self.confirm_on(p, ev, "silent", "P-1", timeout=PAY_TIMEOUT_MS / 1000 + 10)
            out["at"] = time.monotonic()

        th = threading.Thread(target=confirm)
        th.start()
        deadline = time.monotonic() + 10
        while silent.requests == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual(silent.requests, 1, "the charge never reached the silent provider")
        # While the charge waits for its deadline, the same (single) loop answers others.
        answered = 0
        c = self.r.client(p, timeout=5)
        try:
            for _ in range(10):
                self.assertStatus(c.get(f"/v1/events/{ev}/availability"), 200)
                answered += 1
        finally:
            c.close()
        done_others = time.monotonic()
        th.join(timeout=PAY_TIMEOUT_MS / 1000 + 15)
        self.assertIn("r", out, "confirm never returned")
        self.assertStatus(out["r"], 202)
        self.assertEqual(out["r"].json["state"], "pending")
        self.assertEqual(answered, 10)
        self.assertLess(done_others, out["at"], "other requests waited for the provider")
