"""The fans' listener on onsale's own HTTP/1.1 engine (cm_h1, http_engine = h1), with
the transport limits only it can give: a route's body cap decided from the head
(join: 413 before any body byte is sent), a head deadline separate from the whole
request's, plus strictness (malformed heads get the 400 family with docs/api.md's JSON error
body, never a crash or a hang), pipelining in order, HTTP/1.0 and HEAD, and the evhttp
fallback. Raw TLS sockets against the real gateway."""

import json
import time

import gwstack
import stack

HEAD_S = 2
REQUEST_S = 6
IDLE_S = 10


def setUpModule():
    gwstack.module_stack("gw-h1", gateways=1, conf={
        "http_engine": "h1", "head_timeout_s": HEAD_S, "request_timeout_s": REQUEST_S,
        "idle_timeout_s": IDLE_S})


class Conn(stack.RawConn):
    def __init__(self, tc, timeout=10):
        super().__init__(tc.GS.g.port, tc.GS.S.ctx, timeout)


class H1(gwstack.GatewayTestCase):
    def conn(self):
        c = Conn(self)
        self.addCleanup(c.close)
        return c

    def test_join_with_a_body_is_413_before_the_body_is_sent(self):
        ev = self.new_room(rate_per_minute=60)
        c = self.conn()
        c.send(f"POST /q/{ev}/join HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n".encode())
        c.s.settimeout(3)  # no body byte follows: a server waiting for it would time out
        status, headers, body = c.response()
        self.assertEqual(status, 413)
        self.assertEqual(json.loads(body)["error"], "body_too_large")
        self.assertEqual(headers.get("connection"), "close")
        self.assertIsNotNone(c.closed_within(3), "the connection stayed open after the 413")
        # an empty object still joins
        self.assertStatus(self.c.post(f"/q/{ev}/join", {}), 201)

    def test_trickled_head_is_cut_at_the_head_deadline(self):
        c = self.conn()
        c.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        closed = c.trickle_until_closed(REQUEST_S + 4, wait_s=0.25)
        self.assertIsNotNone(closed, "a head trickled a byte at a time was kept open")
        self.assertGreaterEqual(closed, HEAD_S - 0.5)
        self.assertLess(closed, REQUEST_S - 1, "cut by the whole-request deadline, not the head's")

    def test_slow_but_legal_body_gets_the_rest_of_the_request_deadline(self):
        ev = self.new_room(rate_per_minute=60)
        c = self.conn()
        body = b" " * 38 + b"{}"
        c.send(f"POST /q/{ev}/join HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
               "Content-Type: application/json\r\n\r\n".encode())
        start = time.monotonic()
        for b in body:  # 40 bytes over ~3.2 s: past the head deadline, within the request's
            c.send(bytes([b]))
            time.sleep(0.08)
        self.assertGreater(time.monotonic() - start, HEAD_S)
        status, _, answer = c.response()
        self.assertEqual(status, 201, answer)
        self.assertIn("ticket", json.loads(answer))

    def test_pipelined_requests_are_answered_in_order(self):
        ev = self.new_room(rate_per_minute=60)
        c = self.conn()
        c.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
               + f"POST /q/{ev}/join HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{{}}".encode()
               + b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
               + f"HEAD /q/{ev} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
               + b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        got = [c.response()[0], c.response()[0], c.response()[0]]
        status, headers, body = c.response(head_request=True)
        got.append(status)
        self.assertGreater(int(headers["content-length"]), 0)
        self.assertEqual(body, b"")
        got.append(c.response()[0])
        self.assertEqual(got, [200, 201, 404, 200, 200])
        self.assertIsNotNone(c.closed_within(3), "Connection: close was not honoured")

    def test_http10_closes_unless_keep_alive(self):
        c = self.conn()
        c.send(b"GET /healthz HTTP/1.0\r\n\r\n")
        status, headers, _ = c.response()
        self.assertEqual(status, 200)
        self.assertEqual(headers.get("connection"), "close")
        self.assertIsNotNone(c.closed_within(3))
        c = self.conn()
        c.send(b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        self.assertEqual(c.response()[1].get("connection"), "keep-alive")
        c.send(b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        self.assertEqual(c.response()[0], 200)

    def test_malformed_heads_get_a_json_error_and_the_server_lives(self):
        cases = [
            (b"GET /healthz HTTP/1.1\nHost: x\n\n", 400),
            (b"GET /healthz HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", 400),
            (b"GET /healthz HTTP/1.1\r\nHost : x\r\n\r\n", 400),
            (b"GET /healthz HTTP/1.1\r\n\r\n", 400),
            (b"POST /q/e/join HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1"
             b"\r\n\r\n{", 400),
            (b"POST /q/e/join HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
             411),
            (b"POST /q/e/join HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
            (b"GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n", 505),
            (b"BREW /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 501),
            (b"GET /" + b"a" * 3000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
            (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 9000 + b"\r\n\r\n", 431),
            (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX: \x01\r\n\r\n", 400),
            (b"\x16\x03\x01garbage\r\n\r\n", 400),
        ]
        for raw, want in cases:
            with self.subTest(raw=raw[:40]):
                c = self.conn()
                c.send(raw)
                status, headers, body = c.response()
                self.assertEqual(status, want, body)
                doc = json.loads(body)
                self.assertIsInstance(doc.get("error"), str)
                self.assertIsInstance(doc.get("message"), str)
                self.assertEqual(headers.get("content-type"), "application/json")
                self.assertEqual(headers.get("connection"), "close")
                self.assertIsNotNone(c.closed_within(3))
        self.assertStatus(self.c.get("/healthz"), 200)

    def test_the_evhttp_fallback_serves_the_same_routes(self):
        g = self.GS.add_gateway("gw-h1-evhttp", http_engine="evhttp")
        self.addCleanup(g.stop)
        c = g.client()
        self.addCleanup(c.close)
        self.assertStatus(c.get("/healthz"), 200)
        ev = self.new_room(rate_per_minute=60)
        r = c.post(f"/q/{ev}/join", {})
        self.assertStatus(r, 201)
        # evhttp reads the body before the route refuses it: the 413 comes after the body
        r = c.post(f"/q/{ev}/join", raw=b"x" * 1000)
        self.assertStatus(r, 413, "body_too_large")
