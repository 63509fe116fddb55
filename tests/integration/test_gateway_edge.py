"""The connection edge: admin API, dashboard and /metrics only on each
service's admin listener, a token per service; deadlines for the TLS handshake and the
request (a client trickling bytes is cut off, not kept forever); a cap on connections
per client address; join takes no body. Real sockets against the real binaries."""

import socket
import time

import gwstack
import stack
from stack import HOST

HANDSHAKE_S = 2
REQUEST_S = 2
IDLE_S = 4
PER_ADDR = 8


def setUpModule():
    gwstack.module_stack("gw-edge", gateways=1, conf={
        "handshake_timeout_s": HANDSHAKE_S, "request_timeout_s": REQUEST_S,
        "idle_timeout_s": IDLE_S, "max_conns_per_addr": PER_ADDR})


def closed_within(sock, limit_s, feed=None, every_s=0.25):
    """Seconds until the server closes sock (EOF or reset), feeding feed() every every_s
    while waiting; None if still open after limit_s."""
    start = time.monotonic()
    sock.settimeout(every_s)
    while time.monotonic() - start < limit_s:
        try:
            if sock.recv(4096) == b"":
                return time.monotonic() - start
        except (socket.timeout, TimeoutError):
            pass
        except (ConnectionResetError, BrokenPipeError, OSError):
            return time.monotonic() - start
        if feed is not None:
            try:
                feed(sock)
            except (BrokenPipeError, ConnectionResetError, OSError):
                return time.monotonic() - start
    return None


class AdminListener(gwstack.GatewayTestCase):
    def test_fans_port_answers_admin_paths_404(self):
        for path in ("/admin/", "/admin/events", "/metrics"):
            r = self.c.get(path, token=self.GS.S.gateway_admin_token)
            self.assertStatus(r, 404, "not_found", msg=f"gateway fans' port {path}:")
        rc = self.GS.S.client()
        try:
            for path in ("/admin/checkouts", "/admin/events/x", "/metrics"):
                r = rc.get(path, token=self.GS.S.admin_token)
                self.assertStatus(r, 404, "not_found", msg=f"reserve fans' port {path}:")
        finally:
            rc.close()

    def test_admin_listener_serves_them(self):
        self.assertStatus(self.a.get("/admin/"), 200)
        self.assertStatus(self.a.get("/metrics"), 200)
        self.assertStatus(self.GS.admin("GET", "/admin/events"), 200)
        ra = self.GS.S.admin_client()
        try:
            self.assertStatus(ra.get("/metrics"), 200)
            self.assertStatus(ra.get("/admin/checkouts", token=self.GS.S.admin_token), 200)
        finally:
            ra.close()
        # the fans' routes are not on the admin listener
        self.assertStatus(self.a.get("/.well-known/jwks.json"), 404, "not_found")

    def test_a_token_per_service(self):
        S = self.GS.S
        self.assertNotEqual(S.admin_token, S.gateway_admin_token)
        r = self.a.get("/admin/events", token=S.admin_token)
        self.assertStatus(r, 401, "unauthorized", msg="the reserve's token on the gateway:")
        ra = S.admin_client()
        try:
            r = ra.get("/admin/checkouts", token=S.gateway_admin_token)
            self.assertStatus(r, 401, "unauthorized", msg="the gateway's token on the reserve:")
        finally:
            ra.close()

    def test_admin_changes_are_logged(self):
        ev = self.new_room(rate_per_minute=60)
        self.patch(ev, rate_per_minute=120)
        with open(self.GS.g.log_path, "rb") as f:
            log = f.read().decode("utf-8", "replace")
        lines = [l for l in log.splitlines() if "admin change by" in l and f"room {ev}" in l]
        self.assertEqual(len(lines), 2, lines)
        self.assertIn("PUT", lines[0])
        self.assertIn("(none) ->", lines[0])
        self.assertIn('"rate_per_minute":60', lines[1].split(" -> ")[0])
        self.assertIn('"rate_per_minute":120', lines[1].split(" -> ")[1])
        self.assertIn("127.0.0.1 (token ", lines[1])
        self.assertNotIn(self.GS.S.gateway_admin_token, log)


class Deadlines(gwstack.GatewayTestCase):
    def test_silent_connection_closed_at_the_handshake_deadline(self):
        s = socket.create_connection((HOST, self.GS.g.port), timeout=10)
        try:
            t = closed_within(s, HANDSHAKE_S + 6)
        finally:
            s.close()
        self.assertIsNotNone(t, "a connection that never sent a ClientHello stayed open")
        self.assertGreaterEqual(t, HANDSHAKE_S - 0.5)
        # the handshake deadline, not the (longer) idle timeout, closed it
        self.assertLess(t, IDLE_S - 0.5)

    def test_trickled_request_head_closed_at_the_request_deadline(self):
        s = socket.create_connection((HOST, self.GS.g.port), timeout=10)
        s = self.GS.S.ctx.wrap_socket(s, server_hostname=HOST)
        try:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            # a header byte every 250 ms: every inactivity timer would be reset forever
            t = closed_within(s, REQUEST_S + 8, feed=lambda k: k.sendall(b"X"))
        finally:
            s.close()
        self.assertIsNotNone(t, "a request trickled a byte at a time was kept open")
        self.assertGreaterEqual(t, REQUEST_S - 0.5)

    def test_trickled_body_closed_at_the_request_deadline(self):
        s = socket.create_connection((HOST, self.GS.g.port), timeout=10)
        s = self.GS.S.ctx.wrap_socket(s, server_hostname=HOST)
        try:
            s.sendall(b"POST /q/e1/join HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
            t = closed_within(s, REQUEST_S + 8, feed=lambda k: k.sendall(b"{"))
        finally:
            s.close()
        self.assertIsNotNone(t, "a body trickled a byte at a time was kept open")

    def test_a_normal_keepalive_client_is_served(self):
        for _ in range(3):
            self.assertStatus(self.c.get("/healthz"), 200)
            time.sleep(0.5)


class PerAddressCap(gwstack.GatewayTestCase):
    def test_connections_over_the_cap_get_429_then_the_cap_frees(self):
        socks, codes = [], []
        try:
            for i in range(PER_ADDR + 4):
                s = socket.create_connection((HOST, self.GS.g.port), timeout=10)
                s = self.GS.S.ctx.wrap_socket(s, server_hostname=HOST)
                socks.append(s)
            for s in socks:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                head = s.recv(4096).decode("latin-1")
                codes.append(int(head.split(" ", 2)[1]))
        finally:
            for s in socks:
                s.close()
        self.assertIn(429, codes, codes)
        self.assertGreaterEqual(codes.count(200), PER_ADDR - 3, codes)  # the test's own conns
        self.assertLessEqual(codes.count(200), PER_ADDR, codes)
        # every connection closed: a new one is served again
        def healthz():
            c = self.GS.g.client()
            try:
                r = c.get("/healthz")
            finally:
                c.close()
            return r if r.status == 200 else None

        r = stack.wait_for(healthz, 10, interval=0.2, what="/healthz after the cap")
        self.assertStatus(r, 200)


class Bodies(gwstack.GatewayTestCase):
    def test_join_takes_no_body(self):
        ev = self.new_room(rate_per_minute=60)
        r = self.c.post(f"/q/{ev}/join", raw=b"x" * 1000)
        self.assertStatus(r, 413, "body_too_large")
        self.assertStatus(self.c.post(f"/q/{ev}/join", {}), 201)
