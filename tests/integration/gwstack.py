"""Integration harness for the gateway, on top of stack.py.

One private stack per test module (with ONSALE_IT_SHARE_STACKS=1, one per process for
every module of equal configuration: see stack.py) (Redis, Postgres, payment simulator, reserve via
`deploy/onsale up`, as stack.py does) plus the gateway processes this module starts
itself, against the stack's Redis, with a config it writes into the stack's state
directory (server certificate, admission key and admin token come from the stack; the
ticket secret is created here). Several gateways may share the one Redis, on their own
ports, exactly as production runs N of them behind a balancer.

deploy/onsale starts a gateway of its own when it finds build/gateway/onsale-gateway.
These tests need two gateways with known settings (tick_ms, no join limit), so they run
their own and bring the stack up from a "shadow" build directory (symlinks to reserve/
and loadgen/ only) in which `up` finds no gateway to start.

Usage:

    import gwstack

    def setUpModule():
        gwstack.module_stack(gateways=2)

    class T(gwstack.GatewayTestCase):
        def test_x(self):
            ev = self.new_room(rate_per_minute=600)
            j = self.join(ev)
"""

import asyncio
import base64
import json
import os
import shutil
import signal
import struct
import subprocess
import tempfile
import time
import unittest
import uuid

import stack
from stack import HOST, Client, wait_for

READY_TIMEOUT = 30
ROOMS_KEY = "os:gateway:rooms"  # gateway/gw_rediskeys.h GW_ROOMS_KEY
_CURRENT = None

# What the tests' gateways run with (every key of deploy/gateway.conf.example that the
# tests care about; the rest keep their defaults).
DEFAULT_CONF = {
    "listen_addr": HOST,
    "tick_ms": 100,
    "workers": 2,
    "join_rate_per_ip": 0,
    # rooms a test creates without "pow" join without a proof of work, as before it
    # existed; test_gateway_pow.py turns it on and solves the challenges
    "pow_new_rooms": "false",
    "signer_threads": 2,
    "log_level": "info",
    # Rooms bind tickets to keys only when a test asks ("dpop": True, test_gateway_dpop):
    # the other modules' clients send no DPoP proofs.
    "dpop_new_rooms": False,
}


def b64url_decode(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def ticket_fields(ticket):
    """(gen, number, iat, visitor) of a queue ticket (gw_ticket.c's layout: version 1, or
    2 for a ticket bound to a key, whose 16 thumbprint bytes follow the visitor; 3 and 4
    are those of a customer, ticket_customer)."""
    raw = b64url_decode(ticket)
    if (len(raw), raw[0]) not in ((73, 1), (89, 2)) and raw[0] not in (3, 4):
        raise ValueError(f"not a queue ticket: {ticket!r}")
    gen, num, iat = struct.unpack(">QQQ", raw[1:25])
    return gen, num, iat, raw[25:41].hex()


def ticket_customer(ticket):
    """The customer id a customer's ticket carries (versions 3 and 4: its length byte and
    characters after the body of version 1 or 2), or None."""
    raw = b64url_decode(ticket)
    if raw[0] not in (3, 4):
        return None
    at = 41 if raw[0] == 3 else 57
    return raw[at + 1:at + 1 + raw[at]].decode()


def ticket_number(ticket):
    return ticket_fields(ticket)[1]


class Gateway:
    """One onsale-gateway process."""

    def __init__(self, gs, name, port, conf):
        self.gs, self.name, self.port = gs, name, port
        self.admin_port = int(conf["admin_listen"].rsplit(":", 1)[1])
        self.conf_path = os.path.join(gs.S.state, f"gateway-{name}.conf")
        self.log_path = os.path.join(gs.S.root, f"gateway-{name}.log")
        with open(self.conf_path, "w") as f:
            f.write(f"# written by tests/integration/gwstack.py for gateway {name}\n")
            for k, v in conf.items():
                f.write(f"{k} = {v}\n")
        self.proc = None

    def start(self):
        # A second start would leave the first process running on the shared stack, ticking
        # every room of the modules after this one (and writing back their rooms after a
        # Redis loss) with nobody to stop it.
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"gateway {self.name} is already running (pid {self.proc.pid})")
        env = dict(os.environ, ONSALE_STATE=self.gs.S.state)
        for k in list(env):
            if k.startswith("ONSALE_GATEWAY_"):
                del env[k]
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([self.gs.gateway_bin, "--config", self.conf_path],
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env)

        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway {self.name} exited {self.proc.returncode}:\n"
                                   f"{self.gs.S._tail(self.log_path)}")
            c = self.client(timeout=5)
            try:
                return c.get("/readyz").status == 200
            finally:
                c.close()
        wait_for(ready, READY_TIMEOUT, interval=0.1, what=f"gateway {self.name} /readyz")

    def stop(self, timeout=15):
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()
        rc, self.proc = self.proc.returncode, None
        return rc

    def client(self, timeout=stack.HTTP_TIMEOUT):
        return Client(self.port, self.gs.S.ctx, timeout=timeout)

    def admin_client(self, timeout=stack.HTTP_TIMEOUT):
        """This gateway's admin listener (admin API, dashboard, /metrics)."""
        return Client(self.admin_port, self.gs.S.ctx, timeout=timeout)

    def req(self, method, path, token=None, body=None, raw=None, headers=None):
        return stack.build_request(method, path, token, body, raw, headers, self.port)

    def burst(self, reqs, connect_concurrency=50, timeout=60):
        return asyncio.run(stack._bursts(self.port, self.gs.S.ctx, [reqs], connect_concurrency,
                                         timeout))[0]


class GatewayStack:
    def __init__(self, name, gateways=1, conf=None, redis_tls=None):
        self.S = stack.Stack(name, redis_tls=redis_tls)
        self.real_build = self.S.build
        # ONSALE_GATEWAY_BIN runs another gateway binary against the same tests (e.g. one
        # built from an earlier commit, to see a regression test fail before its fix).
        self.gateway_bin = os.environ.get("ONSALE_GATEWAY_BIN") or os.path.join(
            self.real_build, "gateway", "onsale-gateway")
        self.n = gateways
        self.conf = dict(DEFAULT_CONF, **(conf or {}))
        self.gateways = []
        self.shadow = None

    def start(self):
        if not os.access(self.gateway_bin, os.X_OK):
            raise RuntimeError(f"onsale-gateway not built: {self.gateway_bin}")
        # With ONSALE_IT_SHARE_STACKS=1 an equally configured stack of an earlier module
        # (kind "gateway": brought up without deploy/onsale's gateway) is taken over.
        self.S = stack.acquire(self.S, "gateway", self._start_stack)
        self.shadow = getattr(self.S, "shadow", None)
        st = self.S.state
        self.secret_path = os.path.join(st, "gateway-ticket-secret")
        if not os.path.exists(self.secret_path):
            fd = os.open(self.secret_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(os.urandom(32).hex())
        self.code_secret_path = os.path.join(st, "gateway-code-secret")
        if not os.path.exists(self.code_secret_path):
            fd = os.open(self.code_secret_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(os.urandom(32).hex())
        ports = stack._free_ports(self.n)
        for i in range(self.n):
            self.add_gateway(f"g{i + 1}", ports[i])

    def _start_stack(self):
        # deploy/onsale sees no gateway in the shadow build dir (see the module doc).
        self.shadow = tempfile.mkdtemp(prefix="onsale-gw-build-")
        os.chmod(self.shadow, 0o755)
        self.S.shadow = self.shadow  # removed with the stack when it is shared
        for d in ("reserve", "loadgen"):
            os.symlink(os.path.join(self.real_build, d), os.path.join(self.shadow, d))
        self.S.build = self.shadow
        self.S.start()

    def base_conf(self, port):
        st = self.S.state
        c = {
            "port": port,
            "tls_cert": os.path.join(st, "server.pem"),
            "tls_key": os.path.join(st, "server-key.pem"),
            "redis_host": HOST,
            "redis_port": self.S.redis_port,
            **({"redis_cluster": self.S.redis_seeds} if self.S.cluster else {}),
            "redis_user": self.S.redis_service_auth["gateway"][0],
            "redis_password_file": self.S.redis_service_password_path["gateway"],
            **({"redis_tls": "on", "redis_tls_ca_file": self.S.ca,
                "redis_tls_cert_file": os.path.join(st, "server.pem"),
                "redis_tls_key_file": os.path.join(st, "server-key.pem")}
               if self.S.redis_tls else {}),
            "signing_keys": self.S.key_path,
            "ticket_secret_file": self.secret_path,
            "code_secret_file": self.code_secret_path,
            "admin_token_file": os.path.join(st, "gateway-admin-token"),
            "admin_listen": f"{HOST}:{stack._free_ports(1)[0]}",
            "reserve_url": f"https://{HOST}:{self.S.reserve_port}",
        }
        c.update(self.conf)
        return c

    def add_gateway(self, name, port=None, **overrides):
        port = port or stack._free_ports(1)[0]
        g = Gateway(self, name, port, dict(self.base_conf(port), **overrides))
        self.gateways.append(g)
        g.start()
        return g

    def stop(self):
        for g in self.gateways:
            try:
                rc = g.stop()
                if rc not in (0, None):
                    import sys
                    sys.stderr.write(f"[gwstack] gateway {g.name} exited {rc}:\n"
                                     f"{self.S._tail(g.log_path)}\n")
            except Exception as e:  # noqa: BLE001 — keep tearing down
                import sys
                sys.stderr.write(f"[gwstack] stopping gateway {g.name}: {e}\n")
        self.gateways = []
        shared = False
        try:
            shared = stack.release(self.S)
            if shared:
                # The next module's gateways start as on a fresh stack: they learn no room
                # of this module (each gateway ticks every room in the set).
                self.S.redis("DEL", ROOMS_KEY)
        finally:
            if self.shadow and not shared:
                shutil.rmtree(self.shadow, ignore_errors=True)

    @property
    def g(self):
        return self.gateways[0]

    def admin(self, method, path, body=None, gw=None, raw=None):
        c = (gw or self.g).admin_client()
        try:
            return c.request(method, path, body=body, raw=raw,
                             token=self.S.gateway_admin_token)
        finally:
            c.close()

    def redis(self, *args):
        return self.S.redis(*args)

    def room_state(self, event):
        """{field: int} of the room's Redis state hash (wm, last, claimed, …)."""
        flat = self.redis("HGETALL", f"os:{{{event}}}:q:st") or []
        out = {}
        for k, v in zip(flat[::2], flat[1::2]):
            try:
                out[k.decode()] = int(float(v))
            except ValueError:
                pass
        return out

    def watermark(self, event):
        return self.room_state(event).get("wm", 0)


def module_stack(name=None, gateways=1, conf=None, redis_tls=None):
    """Starts the stack and gateways for the calling module (call from setUpModule)."""
    global _CURRENT
    gs = GatewayStack(name or "gw", gateways, conf, redis_tls)

    def cleanup():
        global _CURRENT
        _CURRENT = None
        gs.stop()

    unittest.addModuleCleanup(cleanup)
    _CURRENT = gs
    gs.start()
    return gs


def new_id(prefix="gw"):
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


def rfc3339(ts):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts * 1000) % 1000:03d}Z"


class GatewayTestCase(unittest.TestCase):
    maxDiff = 4000

    @property
    def GS(self):
        if _CURRENT is None:
            raise RuntimeError("no stack: call gwstack.module_stack() in setUpModule")
        return _CURRENT

    def setUp(self):
        self.c = self.GS.g.client()
        self.addCleanup(self.c.close)
        self.a = self.GS.g.admin_client()  # admin API, dashboard, /metrics
        self.addCleanup(self.a.close)

    def assertStatus(self, resp, status, error=None, msg=""):
        want = f"{status}" + (f" {{'error': {error!r}}}" if error else "")
        self.assertEqual(resp.status, status, f"{msg} expected {want}, got {resp!r}")
        if error is not None:
            self.assertIsInstance(resp.json, dict, f"{msg} error body is not JSON: {resp!r}")
            self.assertEqual(resp.err, error, f"{msg} expected {want}, got {resp!r}")
            self.assertIsInstance(resp.json.get("message"), str,
                                  f"{msg} error without a message: {resp!r}")

    def new_room(self, prefix="gw", expect=201, **settings):
        ev = new_id(prefix)
        r = self.GS.admin("PUT", f"/admin/events/{ev}", settings)
        self.assertStatus(r, expect, msg=f"PUT /admin/events/{ev}:")
        return ev

    def patch(self, ev, gw=None, **settings):
        r = self.GS.admin("PATCH", f"/admin/events/{ev}", settings, gw=gw)
        self.assertStatus(r, 200, msg=f"PATCH /admin/events/{ev}:")
        return r.json

    def join(self, ev, client=None, expect=201, **kw):
        r = (client or self.c).post(f"/q/{ev}/join", **kw)
        if expect is not None:
            self.assertStatus(r, expect, msg="join:")
        return r

    def status(self, ev, ticket, client=None):
        return (client or self.c).get(f"/q/{ev}/status", token=ticket)

    def poll_fans(self, ev, tickets, seconds, admitted=None, until=None):
        """Polls every fan not yet admitted, the gateways in turn, for `seconds` (or until
        number `until` is admitted); fills and returns ({number: admission token},
        {number: the last answer's json})."""
        admitted = {} if admitted is None else admitted
        last = {}
        clients = [g.client() for g in self.GS.gateways]
        try:
            end, k = time.monotonic() + seconds, 0
            while time.monotonic() < end:
                for t in tickets:
                    num = ticket_number(t)
                    if num in admitted:
                        continue
                    r = self.status(ev, t, client=clients[k % len(clients)])
                    k += 1
                    self.assertStatus(r, 200, msg=f"status of {num}:")
                    last[num] = r.json
                    if r.json["state"] == "admitted":
                        admitted[num] = r.json["admission_token"]
                if until in admitted:
                    break
                time.sleep(0.05)
        finally:
            for c in clients:
                c.close()
        return admitted, last

    def burst_join(self, ev, n, gateways=None):
        """n concurrent joins spread over the gateways; returns their tickets."""
        gws = gateways or self.GS.gateways
        per = [[] for _ in gws]
        for i in range(n):
            per[i % len(gws)].append(gws[i % len(gws)].req("POST", f"/q/{ev}/join"))
        out = []
        import concurrent.futures
        with concurrent.futures.ThreadPoolExecutor(len(gws)) as ex:
            results = list(ex.map(lambda p: p[0].burst(p[1]) if p[1] else [], zip(gws, per)))
        for res in results:
            for r in res:
                self.assertEqual(r.status, 201, f"burst join: {r!r}")
                out.append(r.json["ticket"])
        return out


def jwks_keys(gw):
    c = gw.client()
    try:
        r = c.get("/.well-known/jwks.json")
    finally:
        c.close()
    if r.status != 200:
        raise AssertionError(f"JWKS: {r!r}")
    return json.loads(r.body)
