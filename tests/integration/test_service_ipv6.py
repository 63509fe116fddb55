"""IPv6 listeners (docs/operations.md, "Networks"): a gateway and a reserve started with
`listen_addr = ::1` and `admin_listen = [::1]:PORT` serve fans and operators over IPv6
with TLS — a join and a poll on the gateway, an availability read and a hold on the
reserve, /readyz and /metrics on both admin listeners — and see the fan's IPv6 address
(the access line's peer). `listen_addr = ::` takes both families (the host's default
bindv6only=0), so an IPv4 client reaches the same port. A listen address that is neither
family, or an admin_listen without its brackets, is refused at start with a clear error.
Each process runs against this module's stack (its Redis and Postgres)."""

import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import unittest

import stack

S = None
BOUND = 20


def setUpModule():
    global S
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError as e:
        raise unittest.SkipTest(f"no IPv6 loopback here ({e})")
    S = stack.module_stack("ipv6")


def free_port6():
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
        s.bind(("::1", 0))
        return s.getsockname()[1]


class Process(unittest.TestCase):
    """One service process against the module's stack, with a config of its own."""

    def setUp(self):
        if S.cluster:
            self.skipTest("one process against one stack; the topology does not matter")
        self.dir = tempfile.mkdtemp(prefix="onsale-ipv6-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        # the dev certificate names 127.0.0.1 and localhost, not ::1: the CA is still checked
        self.ctx = ssl.create_default_context(cafile=S.ca)
        self.ctx.check_hostname = False

    def start(self, service, **keys):
        binary = os.path.join(S.build, service, f"onsale-{service}")
        with open(os.path.join(S.state, f"{service}.conf")) as f:
            conf = f.read()
        path = os.path.join(self.dir, f"{service}.conf")
        with open(path, "w") as f:
            f.write(conf + "".join(f"{k} = {v}\n" for k, v in keys.items()))
        log_path = os.path.join(self.dir, f"{service}.log")
        log = open(log_path, "ab")
        self.addCleanup(log.close)
        env = {k: v for k, v in os.environ.items() if not k.startswith("ONSALE_")}
        proc = subprocess.Popen([binary, "--config", path, "--workers=1"], env=env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

        def stop():
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
        self.addCleanup(stop)
        return proc, log_path

    def get(self, host, port, path, token=None, method="GET", body=None):
        c = http.client.HTTPSConnection(host, port, context=self.ctx, timeout=10)
        try:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            if body is not None:
                headers["Content-Type"] = "application/json"
            c.request(method, path, body=json.dumps(body) if body is not None else None,
                      headers=headers)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def ready(self, host, admin):
        def up():
            try:
                return self.get(host, admin, "/readyz")[0] == 200
            except OSError:
                return False
        stack.wait_for(up, BOUND, interval=0.1, what=f"/readyz on [{host}]:{admin}")


class Listener(Process):
    def test_gateway_serves_fans_and_operators_over_ipv6(self):
        port, admin = free_port6(), free_port6()
        _, log = self.start("gateway", listen_addr="::1", port=port,
                            admin_listen=f"[::1]:{admin}", access_log="true")
        self.ready("::1", admin)
        ev = stack.new_id("v6")
        status, _ = self.get("::1", admin, f"/admin/events/{ev}", S.gateway_admin_token,
                             "PUT", {"rate_per_minute": 600, "dpop": False, "pow": False})
        self.assertEqual(status, 201)
        status, body = self.get("::1", port, f"/q/{ev}/join", method="POST")
        self.assertIn(status, (200, 201), body)
        ticket = json.loads(body)["ticket"]
        status, body = self.get("::1", port, f"/q/{ev}/status", ticket)
        self.assertEqual(status, 200, body)
        status, body = self.get("::1", admin, "/metrics", S.gateway_admin_token)
        self.assertEqual(status, 200)
        self.assertIn(b"onsale_gateway_joins_total", body)

        def peer_logged():
            with open(log) as f:
                return any("route=join" in ln and "peer=::1" in ln for ln in f)
        stack.wait_for(peer_logged, BOUND, what="the join's access line with peer=::1")

    def test_reserve_serves_fans_and_operators_over_ipv6(self):
        port, admin = free_port6(), free_port6()
        self.start("reserve", listen_addr="::1", port=port, admin_listen=f"[::1]:{admin}")
        self.ready("::1", admin)
        ev = stack.new_id("v6")
        self.assertEqual(S.create_event(ev, seats=[{"id": "A-1", "section": "A", "price": 100}])
                         .status, 201)
        status, body = self.get("::1", port, f"/v1/events/{ev}/availability")
        self.assertEqual(status, 200, body)
        status, body = self.get("::1", port, f"/v1/events/{ev}/holds", S.token(ev, "v6-buyer"),
                                "POST", {"seats": ["A-1"]})
        self.assertEqual(status, 201, body)

    def test_any_address_takes_both_families(self):
        port, admin = free_port6(), free_port6()
        self.start("reserve", listen_addr="::", port=port, admin_listen=f"[::1]:{admin}")
        self.ready("::1", admin)
        for host in ("::1", "127.0.0.1"):
            try:
                status, _ = self.get(host, port, "/healthz")
            except OSError as e:  # the host binds IPv6 only (bindv6only=1)
                if host == "127.0.0.1":
                    self.skipTest(f"this host keeps :: to IPv6 ({e})")
                raise
            self.assertIn(status, (200, 404), host)  # answered: health lives on the admin port

    def test_bad_addresses_are_refused_at_start(self):
        for keys, want in (({"listen_addr": "not-an-address"}, "not an IPv4 or IPv6 address"),
                           ({"admin_listen": f"::1:{free_port6()}"}, "[ipv6]:port")):
            proc, log = self.start("gateway", port=free_port6(), **keys)
            self.assertNotEqual(proc.wait(BOUND), 0, keys)
            with open(log) as f:
                self.assertIn(want, f.read(), keys)


def free_port4():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ByName(Process):
    """redis_host and pg_conninfo's host as names, looked up on the loop (item 8)."""

    def conf_value(self, service, key):
        with open(os.path.join(S.state, f"{service}.conf")) as f:
            for line in f:
                k, _, v = line.partition("=")
                if k.strip() == key:
                    return v.strip().strip('"')
        self.fail(f"{key} not in {service}.conf")

    def test_gateway_reaches_redis_by_name(self):
        port, admin = free_port4(), free_port4()
        _, log = self.start("gateway", port=port, admin_listen=f"127.0.0.1:{admin}",
                            redis_host="localhost")
        self.ready("127.0.0.1", admin)
        ev = stack.new_id("dns")
        status, _ = self.get("127.0.0.1", admin, f"/admin/events/{ev}", S.gateway_admin_token,
                             "PUT", {"rate_per_minute": 600, "dpop": False, "pow": False})
        self.assertEqual(status, 201)
        status, body = self.get("127.0.0.1", port, f"/q/{ev}/join", method="POST")
        self.assertIn(status, (200, 201), body)

    def test_reserve_reaches_redis_and_postgres_by_name(self):
        port, admin = free_port4(), free_port4()
        conninfo = self.conf_value("reserve", "pg_conninfo") + " host=localhost"
        self.start("reserve", port=port, admin_listen=f"127.0.0.1:{admin}",
                   redis_host="localhost", pg_conninfo=f'"{conninfo}"')
        self.ready("127.0.0.1", admin)
        ev = stack.new_id("dns")
        self.assertEqual(S.create_event(ev, seats=[{"id": "A-1", "section": "A", "price": 100}])
                         .status, 201)
        status, body = self.get("127.0.0.1", port, f"/v1/events/{ev}/holds",
                                S.token(ev, "dns-buyer"), "POST", {"seats": ["A-1"]})
        self.assertEqual(status, 201, body)

    def test_name_that_does_not_resolve_keeps_it_unready(self):
        port, admin = free_port4(), free_port4()
        proc, log = self.start("gateway", port=port, admin_listen=f"127.0.0.1:{admin}",
                               redis_host="redis.onsale.invalid", redis_timeout_ms="300")

        def logged():
            with open(log) as f:
                return any("redis redis.onsale.invalid" in ln and "cannot connect" in ln
                           for ln in f)
        stack.wait_for(logged, BOUND, interval=0.1, what="the failed lookup logged")

        def answers():
            try:
                return self.get("127.0.0.1", admin, "/readyz")[0]
            except OSError:
                return None
        stack.wait_for(lambda: answers() is not None, BOUND, interval=0.1, what="/readyz")
        self.assertEqual(answers(), 503)
        self.assertEqual(self.get("127.0.0.1", admin, "/healthz")[0], 200)
        self.assertIsNone(proc.poll())


if __name__ == "__main__":
    unittest.main()
