"""A burst of new TLS connections must not starve the gateway's Redis replies.

Regression (the simulator's seed night and stadium): under a burst of fan
connections the gateway's Redis commands passed their deadline while Redis sat nearly
idle — the event loop served every pending TLS handshake (each ~0.3–0.5 ms of CPU) before
it read the Redis connection, and a deadline could even fire while its reply sat read but
unprocessed — so joins got 503 and, past 1,024 late replies, the Redis connection was
dropped (a 503 storm).

The burst here is built so that the gateway finds many ClientHellos ready at once while
joins of already-connected fans wait for Redis: every burst connection is opened first
(TCP only), their ClientHellos are made in memory (ssl.MemoryBIO) and written back to
back, while WARM keep-alive connections keep a join each in flight. A burst connection,
once its handshake is done, polls its status (answered from the room cache, no Redis
command), so Redis stays nearly idle and any join that passes its deadline was held by
the gateway's own loop. Scaled down to the test's size: the gateway serves an RSA-4096
certificate (~5 ms of CPU per handshake instead of ~0.2 ms with the stack's P-256 one),
so a few hundred handshakes in one loop pass hold it for far longer than the
REDIS_TIMEOUT_MS deadline (1 s in production), while one handshake stays far below it.
Every join and every poll must be answered, none with 503.
"""

import json
import os
import selectors
import socket
import ssl
import time
import unittest

import gwstack
import stack
import subprocess
from stack import HOST

BURST = int(os.environ.get("ONSALE_TEST_BURST", "800"))  # new connections per worker
WARM = 64  # keep-alive connections with a join always in flight
REDIS_TIMEOUT_MS = 500
RUN_TIMEOUT = 60


def setUpModule():
    gs = gwstack.module_stack("gwburst", gateways=0,
                              conf={"redis_timeout_ms": REDIS_TIMEOUT_MS, "log_level": "info"})
    global RSA_CERT, RSA_KEY
    RSA_CERT, RSA_KEY = rsa_certificate(gs.S.state)


def rsa_certificate(state):
    """An RSA-4096 server certificate for 127.0.0.1 signed by the stack's CA."""
    key, csr, crt = (os.path.join(state, f"burst-rsa.{x}") for x in ("key", "csr", "pem"))
    ext = os.path.join(state, "burst-rsa.ext")
    with open(ext, "w") as f:
        f.write("subjectAltName = IP:127.0.0.1\n")
    subprocess.run(["openssl", "req", "-new", "-newkey", "rsa:4096", "-nodes", "-keyout", key,
                    "-subj", "/CN=127.0.0.1", "-out", csr], check=True, capture_output=True)
    subprocess.run(["openssl", "x509", "-req", "-in", csr, "-CA", os.path.join(state, "ca.pem"),
                    "-CAkey", os.path.join(state, "ca-key.pem"), "-CAcreateserial", "-days", "2",
                    "-extfile", ext, "-out", crt], check=True, capture_output=True)
    return crt, key


class _Conn:
    """One client connection driven by hand: TLS through MemoryBIOs, HTTP/1.1 keep-alive."""

    def __init__(self, port, ctx, warm):
        self.sock = socket.create_connection((HOST, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.inc, self.out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = ctx.wrap_bio(self.inc, self.out, server_hostname=HOST)
        self.warm = warm
        self.ready = False
        self.buf = b""
        self.busy = False
        self.done = False
        self.failed = False  # closed or reset before its answer

    def step_handshake(self):
        try:
            self.tls.do_handshake()
            self.ready = True
        except ssl.SSLWantReadError:
            pass
        self.flush()

    def flush(self):
        data = self.out.read()
        if data:
            blocking = self.sock.getblocking()
            self.sock.setblocking(True)
            self.sock.sendall(data)
            self.sock.setblocking(blocking)

    def send(self, req):
        self.tls.write(req)
        self.busy = True
        self.flush()

    def feed(self, data):
        self.inc.write(data)
        if not self.ready:
            self.step_handshake()
            if not self.ready:
                return []
        while True:
            try:
                chunk = self.tls.read(65536)
            except ssl.SSLWantReadError:
                break
            if not chunk:
                break
            self.buf += chunk
        out = []
        while True:
            head, sep, rest = self.buf.partition(b"\r\n\r\n")
            if not sep:
                break
            lines = head.split(b"\r\n")
            status = int(lines[0].split()[1])
            clen = 0
            for ln in lines[1:]:
                k, _, v = ln.partition(b":")
                if k.strip().lower() == b"content-length":
                    clen = int(v.strip())
            if len(rest) < clen:
                break
            out.append((status, rest[:clen]))
            self.buf = rest[clen:]
        return out


def answer_cause(status, body):
    """ "503 overloaded" for a policy refusal that says when to come back (its
    retry_after_seconds), else the status and the error code of the body."""
    try:
        doc = json.loads(body)
    except ValueError:
        return f"{status} -"
    err = doc.get("error", "-") if isinstance(doc, dict) else "-"
    if err == "overloaded" and not isinstance(doc.get("retry_after_seconds"), int):
        err = "overloaded-without-retry-after"
    return f"{status} {err}"


def handshake_burst(port, ctx, join_req, poll_req, burst, warm, timeout):
    """Joins from `warm` connected fans while `burst` new fans all handshake at once and
    then poll (poll_req).
    Returns (statuses of every join, burst connections that never got an answer, the
    first few bodies of answers other than 201, every other answer's "status error" with
    its count)."""
    sel = selectors.DefaultSelector()
    statuses, bodies, causes = [], [], {}
    warm_conns = []
    for _ in range(warm):
        c = _Conn(port, ctx, True)
        c.sock.setblocking(True)
        while not c.ready:
            c.step_handshake()
            if not c.ready:
                c.sock.setblocking(True)
                c.inc.write(c.sock.recv(65536))
        c.sock.setblocking(False)
        warm_conns.append(c)
    burst_conns = [_Conn(port, ctx, False) for _ in range(burst)]
    for c in warm_conns + burst_conns:
        c.sock.setblocking(False)
        sel.register(c.sock, selectors.EVENT_READ, c)
    for c in warm_conns:
        c.send(join_req)
    # let the warm joins settle into a steady stream, then every ClientHello at once
    t_end = time.monotonic() + 0.3
    fired = False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not fired and time.monotonic() >= t_end:
            hellos = []
            for c in burst_conns:
                try:
                    c.tls.do_handshake()
                except ssl.SSLWantReadError:
                    pass
                hellos.append((c, c.out.read()))
            for c, h in hellos:
                c.sock.setblocking(True)
                c.sock.sendall(h)
                c.sock.setblocking(False)
            fired = True
        if fired and all(c.done for c in burst_conns):
            break
        for key, _ in sel.select(0.05):
            c = key.data
            try:
                data = c.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                data = b""
            if not data:
                sel.unregister(c.sock)
                c.done = c.failed = True
                continue
            was_ready = c.ready
            try:
                answers = c.feed(data)
            except ssl.SSLError:
                sel.unregister(c.sock)
                c.done = c.failed = True
                continue
            try:
                if not c.warm and c.ready and not was_ready:
                    c.send(poll_req)
                for st, body in answers:
                    statuses.append(st)
                    if st not in (200, 201):
                        causes[answer_cause(st, body)] = causes.get(answer_cause(st, body), 0) + 1
                        if len(bodies) < 5:
                            bodies.append(body.decode(errors="replace")[:200])
                    c.busy = False
                    if c.warm and not all(b.done for b in burst_conns):
                        c.send(join_req)
                    elif not c.warm:
                        c.done = True
            except OSError as e:  # the gateway closed it: counted as unanswered
                if len(bodies) < 5:
                    bodies.append(f"{type(e).__name__}: {e}")
                sel.unregister(c.sock)
                c.done = True
                c.failed = True
    for c in warm_conns + burst_conns:
        c.sock.close()
    sel.close()
    unanswered = sum(1 for c in burst_conns if not c.done or c.failed)
    return statuses, unanswered + sum(1 for c in warm_conns if c.failed), bodies, causes


class HandshakeBurst(gwstack.GatewayTestCase):
    def setUp(self):
        pass

    def check(self, workers):
        # max_handshakes sized for this certificate as docs/operations.md says (16 × ~5 ms
        # stays well under shed_lag_ms): the policy defers accepts, and no join may be shed
        g = self.GS.add_gateway(f"burst{workers}", workers=workers, tls_cert=RSA_CERT,
                                tls_key=RSA_KEY, handshake_timeout_s=60, max_handshakes=16)
        self.addCleanup(g.stop)
        ev = gwstack.new_id("burst")
        r = self.GS.admin("PUT", f"/admin/events/{ev}", {"rate_per_minute": 60, "paused": True}, gw=g)
        self.assertStatus(r, 201)
        join = stack.build_request("POST", f"/q/{ev}/join", port=g.port)[2]
        with open(g.log_path, "rb") as f:
            f.seek(0, 2)
            log_from = f.tell()
        c = g.client()
        try:
            r = c.post(f"/q/{ev}/join")
        finally:
            c.close()
        self.assertStatus(r, 201)
        poll = stack.build_request("GET", f"/q/{ev}/status", token=r.json["ticket"],
                                   port=g.port)[2]
        statuses, unanswered, bodies, causes = handshake_burst(
            g.port, self.GS.S.ctx, join, poll, BURST * workers, WARM, RUN_TIMEOUT)
        with open(g.log_path, "rb") as f:
            f.seek(log_from)
            log = f.read().decode(errors="replace")
        counts = {}
        for s in statuses:
            counts[s] = counts.get(s, 0) + 1
        stack.note(f"handshake burst, {workers} worker(s): {BURST * workers} new connections, "
                   f"{WARM} warm; statuses {json.dumps(counts)}; unanswered {unanswered}")
        self.assertEqual(unanswered, 0,
                         f"connections never answered; statuses {counts}; {bodies}")
        self.assertGreaterEqual(len(statuses), BURST * workers)
        # Redis replies beat the burst: no answer failed for want of one (a 503 of a
        # Redis deadline, "admission failed (timeout)"). A machine that is truly
        # overloaded — this one, running other suites beside this test — may make the
        # overload policy shed early, which is an answer by design: 503 overloaded with
        # when to come back (docs/design.md, "Overload"). Nothing else.
        self.assertEqual({c: n for c, n in causes.items() if c != "503 overloaded"}, {},
                         f"answers other than 200/201 and policy 503s during a handshake "
                         f"burst: {causes}\n{bodies}\n{log[-2000:]}")
        self.assertLessEqual(set(counts), {200, 201, 503}, f"statuses {counts}")
        self.assertGreater(counts.get(201, 0) + counts.get(200, 0), len(statuses) // 2,
                           f"most answers must be served during the burst: {counts}")
        self.assertNotIn("past their deadline", log)

    def test_one_worker_redis_replies_beat_a_handshake_burst(self):
        self.check(1)

    def test_two_workers_redis_replies_beat_a_handshake_burst(self):
        self.check(2)


if __name__ == "__main__":
    unittest.main()
