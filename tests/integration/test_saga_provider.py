"""The reserve's payment-provider client (reserve/rsv_pay.c, libcurl's multi interface on
the worker's loop):

- a provider named by a host name (https://localhost:<port>) works — resolved off the
  loop, its certificate checked against the configured CA for that name;
- confirmations in a row reuse a small number of kept-alive TLS connections (counted by
  the simulator's GET /v1/stats: requests against completed TLS handshakes);
- a provider that completes TLS, reads the request and never answers: the call's deadline
  passes → 202 pending, and the same single-worker reserve keeps answering other requests
  meanwhile (its loop is not blocked);
- one provider 500 (the simulator's pm_sim_error_once fails an intent's first
  confirmation only) is resolved by the buyer's own request within seconds — the saga's
  retry, not the reconciler (reconcile_after_s is huge) — and logged at warn with the
  status, Stripe's error type and code and the checkout id; so is a confirmation lost on
  its way to the provider (pm_sim_lost_once: the reserve's deadline passes, the retry's
  fresh confirmation goes through).

And the sequential round trips of one confirmation (docs/confirm.md): the Redis scripts
one confirmation runs, seen by MONITOR — read, extend, convert (6 before: a second
extend, and a read before each script) — and the fallback when the hold's record no
longer has the layout the drive remembered (the script answers STALE: read, run again).

Each Provider test runs its own reserve process (test_saga_crash.Reserves) on the stack's config
with the provider URL under test.
"""

import hashlib
import os
import re
import socket
import ssl
import threading
import time
import uuid

import stack
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
        stack.wait_for(lambda: silent.requests, 10, interval=0.02,
                       what="the charge at the silent provider")
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


class Retry(SagaCase):
    def setUp(self):
        super().setUp()
        self.r = Reserves(self.S)
        self.addCleanup(self.r.stop_all)

    def test_one_provider_500_is_decided_by_the_retry_within_seconds(self):
        p = self.r.start({"ONSALE_RESERVE_RECONCILE_AFTER_S": "86400"})
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        c = self.r.client(p, timeout=20)
        self.addCleanup(c.close)
        t = self.S.token(ev, "retry")
        h = c.post(f"/v1/events/{ev}/holds", {"seats": ["P-9"]}, token=t).json
        start = time.monotonic()
        r = c.post(f"/v1/holds/{h['hold_id']}/confirm", payment(h["amount"], "pm_sim_error_once"),
                   token=t, headers={"Idempotency-Key": uuid.uuid4().hex})
        took = time.monotonic() - start
        self.assertStatus(r, 201, msg="the retry's answer:")
        self.assertLess(took, 5, "the buyer waited for more than the retry")
        cid = r.json["checkout_id"]
        tr = self.transitions(cid)
        self.assertIn(("payment_requested", "paid"), tr)
        self.assertNotIn(("payment_requested", "unknown"), tr, "left to the reconciler")
        self.assertEqual(self.audit_event(ev), {cid: "charged+booked"})
        # the intent was confirmed twice: a stored 500, then the retry's fresh key
        pi = self.pay.intent_of(cid)
        self.assertEqual((pi["status"], pi["id"]), ("succeeded", r.json["charge_id"]))
        with open(os.path.join(self.S.root, f"reserve-{p.port}.log"), errors="replace") as f:
            log = f.read()
        want = (f"warn: checkout {cid}: payment provider error on charge: status 500, "
                f"type api_error, code simulated_error")
        self.assertIn(want, log)
        self.assertIn(f"warn: checkout {cid}: payment retry 1 of 3", log)


    def test_a_lost_confirmation_is_decided_by_the_retry(self):
        p = self.r.start({"ONSALE_RESERVE_RECONCILE_AFTER_S": "86400"})
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        c = self.r.client(p, timeout=20)
        self.addCleanup(c.close)
        t = self.S.token(ev, "lost-once")
        h = c.post(f"/v1/events/{ev}/holds", {"seats": ["P-10"]}, token=t).json
        start = time.monotonic()
        r = c.post(f"/v1/holds/{h['hold_id']}/confirm", payment(h["amount"], "pm_sim_lost_once"),
                   token=t, headers={"Idempotency-Key": uuid.uuid4().hex})
        took = time.monotonic() - start
        self.assertStatus(r, 201, msg="the retry's answer:")
        self.assertGreater(took, PAY_TIMEOUT_MS / 1000, "the first confirmation was not lost")
        self.assertLess(took, PAY_TIMEOUT_MS / 1000 + 3)
        cid = r.json["checkout_id"]
        self.assertNotIn(("payment_requested", "unknown"), self.transitions(cid))
        self.assertEqual(self.audit_event(ev), {cid: "charged+booked"})
        with open(os.path.join(self.S.root, f"reserve-{p.port}.log"), errors="replace") as f:
            log = f.read()
        self.assertIn(f"warn: checkout {cid}: payment provider error on charge: status 0, "
                      f"type -, code - (timeout)", log)
        self.assertIn(f"warn: checkout {cid}: payment retry 1 of 3", log)


class Monitor:
    """Redis MONITOR in a thread: the script calls (EVALSHA/EVAL) whose arguments name a
    given string, in order, as (command, first key). In the cluster topology it watches the
    master that holds the event's keys (their {event} hash tag)."""

    def __init__(self, s, event):
        port = s.redis_port
        if s.cluster:
            s.redis.refresh()
            port = s.redis.slots[stack.key_slot(f"{{{event}}}")]
        self.r = stack.Redis(port, auth=s.redis_auth)
        self.lines = []
        self.stop = False
        self.r("PING")
        self.r.sock.settimeout(0.2)
        self.r.sock.sendall(b"MONITOR\r\n")
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop:
            try:
                line = self.r._line()
            except (socket.timeout, OSError, ConnectionError):
                continue
            self.lines.append(line.decode(errors="replace"))

    def scripts(self, needle):
        """(script sha, first key) of each script call naming needle; an EVALSHA answered
        NOSCRIPT and sent again as EVAL (a connection's first use of a script) is one."""
        out = []
        for ln in self.lines:
            args = re.findall(r'"((?:[^"\\]|\\.)*)"', ln)
            if not args or args[0].lower() not in ("evalsha", "eval") or needle not in ln:
                continue
            sha = args[1]
            if args[0].lower() == "eval":
                body = args[1].encode().decode("unicode_escape").encode("latin-1")
                sha = hashlib.sha1(body).hexdigest()
                if out and out[-1][0] == sha:
                    continue  # the retry of the EVALSHA just before
            out.append((sha, args[3] if len(args) > 3 else ""))
        return out

    def close(self):
        self.stop = True
        self.t.join(timeout=5)
        self.r.close()


class RoundTrips(SagaCase):
    def monitor(self, ev):
        m = Monitor(self.S, ev)
        self.addCleanup(m.close)
        time.sleep(0.2)  # MONITOR is on before the first command we watch
        return m

    def test_a_confirmation_runs_three_redis_scripts(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        t = self.S.token(ev, "trips")
        h = self.hold(ev, t, seats=["P-1", "P-2"]).json
        m = self.monitor(ev)
        r = self.confirm_src(h, t, "tok_visa")
        self.assertStatus(r, 201)
        self.assertEqual(r.json["state"], "confirmed")
        self.assertEqual(r.json["booking_id"], self.S.sql_value(
            f"select booking_id from bookings where checkout_id = '{r.json['checkout_id']}'"))
        time.sleep(0.3)
        calls = m.scripts(h["hold_id"])
        # get (the layout), extend, convert: one script each, nothing read twice.
        self.assertEqual(len(calls), 3, calls)
        self.assertEqual(self.audit_event(ev), {r.json["checkout_id"]: "charged+booked"})

    def test_a_changed_hold_layout_is_read_again_before_converting(self):
        """The record's layout changes under the drive while the charge is out: the convert
        script answers STALE, the record is read again and the script runs again. Two seats
        were charged in full, so the buyer ends with both seats booked or the whole payment
        back — never one seat for the price of two."""
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        t = self.S.token(ev, "stale")
        h = self.hold(ev, t, seats=["P-3", "P-4"]).json
        self.assertEqual(h["amount"], 2 * 3000)
        m = self.monitor(ev)
        out = {}
        th = threading.Thread(target=lambda: out.update(
            r=self.confirm_src(h, t, "tok_sim_delay_1200")))
        th.start()
        key = f"os:{{{ev}}}:h:{h['hold_id']}"
        deadline = time.monotonic() + 5
        while len(m.scripts(h["hold_id"])) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        self.S.redis("HSET", key, "seats", "P-3")
        th.join(timeout=30)
        r = out["r"]
        self.assertIn(r.status, (201, 409), repr(r))
        cid = r.json["checkout_id"]
        time.sleep(0.3)
        calls = m.scripts(h["hold_id"])
        # get, extend, convert (STALE), get, convert: the same script run again.
        self.assertGreaterEqual(len(calls), 5, calls)
        self.assertEqual(calls[2][0], calls[4][0], calls)
        items = sorted(x[0] for x in self.S.sql(
            f"select i.seat_id from booking_items i join bookings b using (booking_id) "
            f"where b.checkout_id = '{cid}'"))
        if r.status == 201:
            self.assertEqual(items, ["P-3", "P-4"], "paid for two seats")
            self.assertEqual(self.audit_event(ev), {cid: "charged+booked"})
        else:
            self.assertEqual(items, [], "refunded, yet booked")
            self.assertEqual((r.json["refund"]["status"], r.json["refund"]["amount"]),
                             ("refunded", h["amount"]), repr(r))
            self.assertEqual(self.audit_event(ev), {cid: "refunded"})
            # The seat the conversion marked sold is given back.
            self.hold(ev, self.S.token(ev, "next"), seats=["P-3"])
