"""The reserve's fans' listener on onsale's own HTTP/1.1 engine (cm_h1, the default
http_engine): the transport limits that evhttp cannot give. Each route's body cap is
decided from the head (a GET, a release or `done` announcing a body, and a hold or a
confirmation announcing more than max_body_bytes, get 413 before any body byte is sent),
the head has its own deadline (head_timeout_s, shorter than the whole request's), and
pipelined requests are answered in order even when the first waits on Redis. evhttp stays
selectable (http_engine = evhttp). Raw TLS sockets against the real reserve; its small
deadlines are set through its environment.

Single-node topology only: the engine is a property of each reserve process, and HAProxy
in front of the cluster's reserves passes the bytes through (TCP mode)."""

import json
import os
import signal
import subprocess
import unittest

import stack

HEAD_S = 2
REQUEST_S = 6
IDLE_S = 10
MAX_BODY = 65536  # the reserve's max_body_bytes default
ENV = {
    "ONSALE_RESERVE_HEAD_TIMEOUT_S": str(HEAD_S),
    "ONSALE_RESERVE_REQUEST_TIMEOUT_S": str(REQUEST_S),
    "ONSALE_RESERVE_IDLE_TIMEOUT_S": str(IDLE_S),
}
SEATS = [{"id": f"A-{i}", "section": "A", "price": 5000} for i in range(1, 5)]


def setUpModule():
    if stack.topology() == "cluster":
        raise unittest.SkipTest("per-process transport: the single-node run covers it")
    with stack.env_set(ENV):
        stack.module_stack("rsv-h1")


class H1(stack.ReserveTestCase):
    def conn(self, port=None):
        c = stack.RawConn(port or self.S.reserve_port, self.S.ctx)
        self.addCleanup(c.close)
        return c

    def refused_from_the_head(self, head, why):
        """Sends head alone (no body byte after it) and expects its 413 at once."""
        c = self.conn()
        c.send(head.encode())
        c.s.settimeout(3)  # a server waiting for the announced body would time out here
        status, headers, body = c.response()
        self.assertEqual(status, 413, f"{why}: {body!r}")
        self.assertEqual(json.loads(body)["error"], "body_too_large", why)
        self.assertEqual(headers.get("connection"), "close", why)
        self.assertIsNotNone(c.closed_within(3), f"{why}: the connection stayed open")

    def test_slow_head_is_cut_at_the_head_deadline(self):
        c = self.conn()
        c.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        closed = c.trickle_until_closed(REQUEST_S + 4, wait_s=1)
        self.assertIsNotNone(closed, "a head trickled a byte a second was kept open")
        self.assertGreaterEqual(closed, HEAD_S - 0.5)
        self.assertLess(closed, REQUEST_S - 1, "cut by the whole-request deadline, not the head's")
        self.assertStatus(self.c.get("/healthz"), 200)

    def test_body_on_a_no_body_route_is_413_before_the_body_is_sent(self):
        ev = self.new_event(seats=SEATS)
        tok = self.S.token(ev, "nobody-1")
        auth = f"Authorization: Bearer {tok}\r\n"
        for method, path in (("GET", f"/v1/events/{ev}/availability"),
                             ("GET", "/healthz"),
                             ("GET", "/shop/"),
                             ("DELETE", "/v1/holds/0123456789abcdef0123456789abcdef.x"),
                             ("POST", f"/v1/events/{ev}/done"),
                             ("POST", "/v1/holds/0123456789abcdef0123456789abcdef.x/extend"),
                             ("OPTIONS", f"/v1/events/{ev}/holds")):
            with self.subTest(method=method, path=path):
                self.refused_from_the_head(
                    f"{method} {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: 100\r\n\r\n",
                    f"{method} {path}")
        # "no body" allows an empty JSON object (clients that always send one)
        r = self.c.post(f"/v1/events/{ev}/done", {}, token=tok)
        self.assertStatus(r, 200)

    def test_oversized_hold_body_is_413_from_the_head(self):
        ev = self.new_event(seats=SEATS)
        tok = self.S.token(ev, "big-1")
        auth = f"Authorization: Bearer {tok}\r\nContent-Type: application/json\r\n"
        for path in (f"/v1/events/{ev}/holds",
                     "/v1/holds/0123456789abcdef0123456789abcdef.x/confirm"):
            with self.subTest(path=path):
                self.refused_from_the_head(
                    f"POST {path} HTTP/1.1\r\nHost: x\r\n{auth}"
                    f"Content-Length: {MAX_BODY + 1}\r\n\r\n", path)
        # at the cap the body is read and judged by the handler (JSON padded with spaces)
        body = json.dumps({"seats": ["A-1"]}).encode()
        body += b" " * (MAX_BODY - len(body))
        r = self.c.post(f"/v1/events/{ev}/holds", raw=body, token=tok)
        self.assertStatus(r, 201)

    def test_pipelined_requests_are_answered_in_order(self):
        ev = self.new_event(seats=SEATS)
        t1, t2 = self.S.token(ev, "pipe-1"), self.S.token(ev, "pipe-2")
        hold = json.dumps({"seats": ["A-2"]})

        def post_hold(tok):
            return (f"POST /v1/events/{ev}/holds HTTP/1.1\r\nHost: x\r\n"
                    f"Authorization: Bearer {tok}\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(hold)}\r\n\r\n{hold}")

        c = self.conn()
        c.send((post_hold(t1)  # answered from a Redis callback: the rest waits behind it
                + "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                + post_hold(t2)
                + "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
                + "HEAD /shop/ HTTP/1.1\r\nHost: x\r\n\r\n"
                + "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").encode())
        status, _, body = c.response()
        self.assertEqual(status, 201, body)
        self.assertEqual(json.loads(body)["seats"], ["A-2"])
        got = [c.response()[0]]
        status, _, body = c.response()
        got.append(status)
        self.assertEqual(json.loads(body)["error"], "seat_unavailable")
        got.append(c.response()[0])
        status, headers, body = c.response(head_request=True)
        got.append(status)
        self.assertGreater(int(headers["content-length"]), 0)
        got.append(c.response()[0])
        self.assertEqual(got, [200, 409, 404, 200, 200])
        self.assertIsNotNone(c.closed_within(3), "Connection: close was not honoured")

    def test_long_path_is_414_and_a_long_query_is_served(self):
        c = self.conn()
        c.send(b"GET /" + b"a" * 3000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        status, _, body = c.response()
        self.assertEqual(status, 414, body)
        self.assertEqual(json.loads(body)["error"], "uri_too_long")
        q = "event=demo&x=" + "y" * 6000
        r = self.c.get(f"/shop?{q}")
        self.assertStatus(r, 301)
        self.assertEqual(r.header("location"), f"/shop/?{q}")

    def test_the_evhttp_fallback_still_serves(self):
        port, admin_port = stack._free_ports(2)
        env = self.S.env()
        env["ONSALE_RESERVE_HTTP_ENGINE"] = "evhttp"
        log = open(os.path.join(self.S.root, f"reserve-evhttp-{port}.log"), "ab")
        p = subprocess.Popen([self.S.reserve_bin, "--config",
                              os.path.join(self.S.state, f"{self.S.reserve_names[0]}.conf"),
                              "--port", str(port), f"--admin_listen=127.0.0.1:{admin_port}"],
                             env=env, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL)
        log.close()

        def stop():
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
        self.addCleanup(stop)
        c = stack.Client(port, self.S.ctx, timeout=5)
        self.addCleanup(c.close)

        def ready():
            try:
                return c.get("/readyz").status == 200
            except OSError:
                return False
        stack.wait_for(ready, 30, interval=0.1, what="the evhttp reserve ready")
        ev = self.new_event(seats=SEATS)
        self.assertStatus(c.post(f"/v1/events/{ev}/holds", {"seats": ["A-3"]},
                                 token=self.S.token(ev, "ev-1")), 201)
        # evhttp reads a body the route does not take (no cap from the head)
        r = c.request("GET", "/healthz", raw=b"x" * 100)
        self.assertStatus(r, 200)
