"""Integration harness for the reserve service.

One private stack per test module: free loopback ports, a temporary ONSALE_STATE,
`deploy/onsale up` (Redis, Postgres, payment simulator, reserve, …) and, always,
`deploy/onsale down` plus removal of the temporary directory — also when start-up
fails half way (unittest runs module cleanups even when setUpModule raises).

Usage in a test module:

    import stack

    def setUpModule():
        stack.module_stack()

    class MyTest(stack.ReserveTestCase):
        def test_x(self):
            ev = self.new_event(seats=[...])
            tok = self.S.token(ev, "buyer-1")
            r = self.S.client().post(f"/v1/events/{ev}/holds", {"seats": ["A-1"]}, token=tok)
            self.assertStatus(r, 201)

Environment: ONSALE_BUILD_DIR (the build directory: reserve/onsale-reserve,
loadgen/onsale-token), ONSALE_SOURCE_DIR (the repository: deploy/onsale).
ONSALE_IT_SHARE_STACKS=1 (integration.cluster_suites sets it) shares stacks across the
modules of one process: a module whose stack would be configured exactly like one already
running (same topology, same environment for every service — Stack.config_key()) takes
that one instead of bringing up another, and every shared stack goes down when the
process exits. Tests already use fresh event ids and keys (new_id), so they stay
independent; a module that configures its services differently still gets its own.
ONSALE_IT_KEEP_STATE=1 keeps the temporary directory after the run,
ONSALE_IT_LOGS=1 prints the tail of every log in it at teardown.
ONSALE_IT_TOPOLOGY=cluster runs the module against `ONSALE_TOPOLOGY=cluster deploy/onsale
up` (Redis Cluster, two reserves and two gateways behind HAProxy): the client then talks to
HAProxy's reserve front and S.redis is a cluster-aware client (ctest label `cluster`).
Stack(redis_tls=True) (or ONSALE_IT_REDIS_TLS=1) runs `ONSALE_REDIS_TLS=1 deploy/onsale up`:
Redis speaks TLS only, and S.redis / S.new_redis() speak TLS with the stack's CA and
client certificate (S.redis_ssl).

Only the standard library plus Debian's python3-jwt and python3-cryptography.
"""

import asyncio
import atexit
import base64
import collections
import contextlib
import hashlib
import hmac
import http.client
import json
import os
import re
import resource
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import unittest
import uuid

HOST = "127.0.0.1"
UP_TIMEOUT = 240       # deploy/onsale up: initdb + start of every service
DOWN_TIMEOUT = 120
READY_TIMEOUT = 60     # after `up` returns, until /readyz answers 200
HTTP_TIMEOUT = 30      # one request on the synchronous client

_CURRENT = None        # the stack of the module being run
_SHARED = {}           # (kind, Stack.config_key()) -> a running Stack kept for the process


def _env_dir(name, default=None):
    v = os.environ.get(name)
    if v:
        return os.path.abspath(v)
    if default is not None:
        return os.path.abspath(default)
    raise RuntimeError(f"{name} is not set")


ADMIN_OFFSET = 20  # deploy/onsale: each service's admin listener is on its port + 20


def _free_ports_with_admin(n):
    """n distinct free loopback ports p whose p + ADMIN_OFFSET is free as well."""
    out = []
    while len(out) < n:
        p = _free_ports(1)[0]
        if p + ADMIN_OFFSET > 65535 or p in out or p + ADMIN_OFFSET in out:
            continue
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind((HOST, p + ADMIN_OFFSET))
        except OSError:
            continue
        finally:
            s.close()
        out.append(p)
    return out


def _free_ports(n):
    """n distinct free loopback TCP ports (bound together, then released)."""
    socks, ports = [], []
    try:
        while len(ports) < n:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((HOST, 0))
            socks.append(s)
            p = s.getsockname()[1]
            if p not in ports:
                ports.append(p)
    finally:
        for s in socks:
            s.close()
    return ports


def _free_block(n, tries=200):
    """The first of n consecutive free loopback ports (the cluster topology derives its
    ports from a few bases)."""
    import random
    for _ in range(tries):
        # below the ephemeral range (32768+), where outgoing connections take ports
        base = random.randrange(10000, 32000 - n)
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind((HOST, p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no block of {n} free ports")


def topology():
    return os.environ.get("ONSALE_IT_TOPOLOGY", "single")


def _raise_nofile(want=8192):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def wait_for(fn, timeout, interval=0.05, what="condition"):
    """Polls fn() until it returns a truthy value (returned) or timeout passes
    (AssertionError naming `what` and the last value or exception)."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            last = fn()
            if last:
                return last
        except Exception as e:  # noqa: BLE001 — reported below
            last = e
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
        time.sleep(interval)


def private_redis(prefix):
    """A redis-server of the calling test module's own (no persistence), authenticated like
    every Redis of the project (an ACL user; the default user off), stopped at module
    cleanup. Returns its client. Call from setUpModule."""
    root = tempfile.mkdtemp(prefix=prefix)
    port = _free_ports(1)[0]
    password = os.urandom(16).hex()
    proc = subprocess.Popen(["redis-server", "--bind", HOST, "--port", str(port), "--save", "",
                             "--appendonly", "no", "--dir", root, "--user", "default", "off",
                             "--user", "onsale", "on", f">{password}", "~*", "&*", "+@all"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)
    r = Redis(port, auth=("onsale", password))

    def cleanup():
        r.close()
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(root, ignore_errors=True)

    unittest.addModuleCleanup(cleanup)
    wait_for(lambda: r("PING") == "PONG", 10, what="redis-server")
    return r


def lua_script(lua_dir, name):
    """A service's Lua script as the service loads it: prelude.lua in front of NAME.lua."""
    with open(os.path.join(lua_dir, "prelude.lua")) as f:
        prelude = f.read()
    with open(os.path.join(lua_dir, name + ".lua")) as f:
        return prelude + "\n" + f.read()


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def jwt_parts(token):
    h, p, _ = token.split(".")
    return json.loads(b64url_decode(h)), json.loads(b64url_decode(p))


# --------------------------------------------------------------------------- HTTP


def _load_pow_example():
    """docs/examples/pow.py, the documented proof-of-work client (solve, join,
    leading_zero_bits): the suites solve challenges with it, so they check the example too."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs",
                        "examples", "pow.py")
    spec = importlib.util.spec_from_file_location("onsale_pow_example", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


pow_example = _load_pow_example()


class Response:
    def __init__(self, method, path, status, headers, body, latency=None, error=None):
        self.method, self.path = method, path
        self.status = status
        self.headers = headers or {}
        self.body = body or b""
        self.latency = latency
        self.error = error
        self.json = None
        if self.body:
            try:
                self.json = json.loads(self.body)
            except ValueError:
                self.json = None

    def header(self, name):
        return self.headers.get(name.lower())

    @property
    def err(self):
        return self.json.get("error") if isinstance(self.json, dict) else None

    def __repr__(self):
        body = self.body[:400].decode("utf-8", "replace")
        if self.error:
            return f"<{self.method} {self.path} -> transport error {self.error}>"
        return f"<{self.method} {self.path} -> {self.status} {body}>"


class Client:
    """Synchronous keep-alive HTTPS client (http.client) trusting the stack's CA."""

    def __init__(self, port, ctx, host=HOST, timeout=HTTP_TIMEOUT):
        self.host, self.port, self.ctx = host, port, ctx
        self.timeout = timeout
        self.conn = None
        self.used = False

    def _connect(self):
        self.close()
        self.conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx,
                                                timeout=self.timeout)
        self.used = False

    def close(self):
        if self.conn is not None:
            try:
                self.conn.close()
            except OSError:
                pass
        self.conn = None

    def request(self, method, path, body=None, token=None, headers=None, raw=None):
        """body: a JSON-able object (sent as JSON) or None; raw: bytes sent verbatim."""
        hdrs = {"Host": f"{self.host}:{self.port}"}
        if token is not None:
            hdrs["Authorization"] = f"Bearer {token}"
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
        if data is not None:
            hdrs["Content-Type"] = "application/json"
        if headers:
            hdrs.update(headers)
        for attempt in (0, 1):
            if self.conn is None:
                self._connect()
            reused = self.used
            try:
                t0 = time.monotonic()
                self.conn.request(method, path, body=data, headers=hdrs)
                resp = self.conn.getresponse()
                payload = resp.read()
                lat = time.monotonic() - t0
                self.used = True
                rh = {k.lower(): v for k, v in resp.getheaders()}
                if resp.will_close:
                    self.close()
                return Response(method, path, resp.status, rh, payload, latency=lat)
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                    ssl.SSLEOFError, http.client.CannotSendRequest, http.client.BadStatusLine):
                # A keep-alive connection the server closed while idle: reconnect once.
                self.close()
                if attempt or not reused:
                    raise

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body=body, **kw)

    def put(self, path, body=None, **kw):
        return self.request("PUT", path, body=body, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)


class RawConn:
    """A raw TLS connection for what http.client cannot send (a head trickled byte by byte,
    a Content-Length with no body after it, pipelined requests); keeps the bytes read past
    one response for the next."""

    def __init__(self, port, ctx, timeout=10):
        raw = socket.create_connection((HOST, port), timeout=timeout)
        self.s = ctx.wrap_socket(raw, server_hostname=HOST)
        self.pushback = b""

    def send(self, data):
        self.s.sendall(data)

    def recv(self, n):
        if self.pushback:
            b, self.pushback = self.pushback, b""
            return b
        return self.s.recv(n)

    def response(self, head_request=False):
        """(status, headers (lower-case names), body) of the next response."""
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = self.recv(4096)
            if not chunk:
                raise ConnectionError(f"closed before a full head: {buf!r}")
            buf += chunk
        head, rest = buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
        n = 0 if head_request else int(headers.get("content-length", "0"))
        while len(rest) < n:
            chunk = self.recv(4096)
            if not chunk:
                raise ConnectionError("closed inside a body")
            rest += chunk
        self.pushback = rest[n:]
        return status, headers, rest[:n]

    def closed_within(self, limit_s):
        """Seconds until the server closed the connection, or None past limit_s."""
        return self._until_closed(limit_s, 0.25, None)

    def trickle_until_closed(self, limit_s, wait_s=1.0):
        """Sends one byte, waits up to wait_s for the server to answer or close, again and
        again: seconds from the first byte until the server closed, or None past limit_s."""
        return self._until_closed(limit_s, wait_s, b"X")

    def _until_closed(self, limit_s, wait_s, nudge):
        start = time.monotonic()
        self.s.settimeout(wait_s)
        while time.monotonic() - start < limit_s:
            try:
                if nudge:
                    self.s.sendall(nudge)
                if self.s.recv(4096) == b"":
                    return time.monotonic() - start
            except (socket.timeout, TimeoutError):
                pass
            except OSError:
                return time.monotonic() - start
        return None

    def close(self):
        self.s.close()


def delayed(req, seconds):
    """The same request, written `seconds` after the rest of its burst."""
    return (req[0], req[1], req[2], seconds)


def build_request(method, path, token=None, body=None, raw=None, headers=None, port=0):
    """Raw HTTP/1.1 request bytes for the asynchronous burst client."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else b"")
    lines = [f"{method} {path} HTTP/1.1", f"Host: {HOST}:{port}"]
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    for k, v in (headers or {}).items():
        lines.append(f"{k}: {v}")
    if data or method in ("POST", "PUT", "PATCH"):
        lines.append("Content-Type: application/json")
        lines.append(f"Content-Length: {len(data)}")
    return (method, path, ("\r\n".join(lines) + "\r\n\r\n").encode() + data)


async def _read_response(reader, method):
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        body = b""
    elif "chunked" in headers.get("transfer-encoding", "").lower():
        parts = []
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";")[0].strip(), 16)
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass
                break
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
        body = b"".join(parts)
    elif "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    else:
        body = await reader.read()
    return status, headers, body


class _Conn:
    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer
        self.alive = True

    def close(self):
        # abort(): no TLS close_notify round trip, nothing left for the GC to warn about.
        try:
            self.writer.transport.abort()
        except Exception:  # noqa: BLE001
            pass


async def _open_conns(port, ctx, n, concurrency, timeout):
    sem = asyncio.Semaphore(concurrency)

    async def one():
        async with sem:
            r, w = await asyncio.wait_for(
                asyncio.open_connection(HOST, port, ssl=ctx, server_hostname=HOST,
                                        limit=1 << 20), timeout)
            return _Conn(r, w)

    return list(await asyncio.gather(*[one() for _ in range(n)]))


async def _fire(conns, reqs, timeout):
    """Writes every request (one per connection) back to back, then reads every answer.
    Latency of each = from just before its write (Response.sent_at, time.monotonic()) to
    its full response."""
    t_send = [0.0] * len(reqs)
    loop = asyncio.get_running_loop()

    def send(i):
        t_send[i] = time.monotonic()
        conns[i].writer.write(reqs[i][2])

    for i, r in enumerate(reqs):
        if len(r) > 3 and r[3] > 0:
            loop.call_later(r[3], send, i)
        else:
            send(i)

    async def read(i):
        method, path = reqs[i][0], reqs[i][1]
        c = conns[i]
        try:
            status, headers, body = await asyncio.wait_for(_read_response(c.reader, method), timeout)
            lat = time.monotonic() - t_send[i]
            if headers.get("connection", "").lower() == "close":
                c.alive = False
            resp = Response(method, path, status, headers, body, latency=lat)
            resp.sent_at = t_send[i]  # time.monotonic() just before the write
            return resp
        except Exception as e:  # noqa: BLE001 — a transport failure is a result
            c.alive = False
            return Response(method, path, None, {}, b"", latency=time.monotonic() - t_send[i],
                            error=f"{type(e).__name__}: {e}")

    return list(await asyncio.gather(*[read(i) for i in range(len(reqs))]))


async def _bursts(port, ctx, batches, connect_concurrency, timeout):
    n = max((len(b) for b in batches), default=0)
    conns = await _open_conns(port, ctx, n, connect_concurrency, timeout)
    out = []
    try:
        for batch in batches:
            for i in range(len(batch)):
                if not conns[i].alive:
                    conns[i].close()
                    conns[i] = (await _open_conns(port, ctx, 1, 1, timeout))[0]
            out.append(await _fire(conns, batch, timeout))
    finally:
        for c in conns:
            c.close()
        await asyncio.sleep(0.01)
    return out


async def _oversized(port, ctx, path, token, size, timeout):
    r, w = await asyncio.open_connection(HOST, port, ssl=ctx, server_hostname=HOST)
    head = (f"POST {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {size}\r\n\r\n").encode()
    t0 = time.monotonic()
    w.write(head)
    reading = asyncio.ensure_future(_read_response(r, "POST"))
    await asyncio.wait([reading], timeout=0.5)
    sent, chunk = 0, b'{"seats":["A-1"],"pad":"' + b"x" * 65536
    try:
        while not reading.done() and sent < size:
            n = min(len(chunk), size - sent)
            w.write(chunk[:n])
            sent += n
            draining = asyncio.ensure_future(w.drain())
            await asyncio.wait([draining, reading], timeout=timeout,
                               return_when=asyncio.FIRST_COMPLETED)
            if not draining.done():
                draining.cancel()
                break
            if draining.exception() is not None:
                break
    except (ConnectionError, ssl.SSLError, OSError):
        pass
    try:
        status, headers, body = await asyncio.wait_for(reading, timeout)
        resp = Response("POST", path, status, headers, body, latency=time.monotonic() - t0)
    except Exception as e:  # noqa: BLE001
        resp = Response("POST", path, None, {}, b"", error=f"{type(e).__name__}: {e}")
    finally:
        if not reading.done():
            reading.cancel()
        w.transport.abort()
        await asyncio.sleep(0.01)
    resp.sent = sent
    return resp


# --------------------------------------------------------------------------- Redis


class Redis:
    """Minimal RESP2 client (one connection, reconnects on demand)."""

    def __init__(self, port, auth=None, ssl_ctx=None):
        """auth: (user, password) sent as AUTH on every new connection (the stack's Redis
        refuses anything else: its default user is off). ssl_ctx: speak TLS with it."""
        self.port = port
        self.auth = auth
        self.ssl_ctx = ssl_ctx
        self.sock = None
        self.buf = b""

    def close(self):
        if self.sock:
            self.sock.close()
        self.sock, self.buf = None, b""

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def _reply(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            raise RuntimeError(f"redis error: {rest.decode()}")
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise RuntimeError(f"bad RESP line {line!r}")

    def ask(self, *args):
        """Like calling it, but an error reply is returned as ("ERR", text)."""
        try:
            return self(*args)
        except RuntimeError as e:
            msg = str(e)
            if msg.startswith("redis error: "):
                return ("ERR", msg[len("redis error: "):])
            raise

    def __call__(self, *args):
        if self.sock is None:
            self.sock = socket.create_connection((HOST, self.port), timeout=10)
            if self.ssl_ctx is not None:
                self.sock = self.ssl_ctx.wrap_socket(self.sock, server_hostname=HOST)
            if self.auth is not None:
                try:
                    ok = self._send(("AUTH",) + tuple(self.auth))
                except Exception:
                    self.close()
                    raise
                if ok != "OK":
                    self.close()
                    raise RuntimeError(f"redis AUTH failed: {ok!r}")
        return self._send(args)

    def _send(self, args):
        parts = [f"*{len(args)}\r\n".encode()]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(a), a))
        try:
            self.sock.sendall(b"".join(parts))
            return self._reply()
        except (OSError, ConnectionError):
            self.close()
            raise

    def scan_keys(self, pattern):
        keys, cursor = [], b"0"
        while True:
            cursor, batch = self("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)
            keys.extend(batch)
            if cursor in (b"0", 0, "0"):
                return keys

    def int_values(self, pattern):
        """{(key, field-or-None): int} for every integer-valued string key and hash
        field among the keys matching pattern."""
        out = {}
        for k in self.scan_keys(pattern):
            t = self("TYPE", k)
            if t == "string":
                v = self("GET", k)
                if v is not None and re.fullmatch(rb"-?\d+", v):
                    out[(k, None)] = int(v)
            elif t == "hash":
                flat = self("HGETALL", k) or []
                for f, v in zip(flat[::2], flat[1::2]):
                    if re.fullmatch(rb"-?\d+", v):
                        out[(k, f)] = int(v)
        return out


def crc16(data):
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def key_slot(key):
    key = key if isinstance(key, bytes) else str(key).encode()
    i = key.find(b"{")
    if i >= 0:
        j = key.find(b"}", i + 1)
        if j > i + 1:
            key = key[i + 1:j]
    return crc16(key) % 16384


class ClusterRedis:
    """The test's view of a Redis Cluster with Redis's interface above: keyed commands go
    to the master of the key's slot (following MOVED), whole-keyspace ones (FLUSHALL,
    DBSIZE, SCAN via scan_keys) to every master."""

    ALL_MASTERS = {"FLUSHALL", "FLUSHDB", "DBSIZE"}

    def __init__(self, ports, auth=None, ssl_ctx=None):
        self.ports = list(ports)
        self.auth = auth
        self.ssl_ctx = ssl_ctx
        self.conns = {}
        self.slots = None

    def _conn(self, port):
        if port not in self.conns:
            self.conns[port] = Redis(port, auth=self.auth, ssl_ctx=self.ssl_ctx)
        return self.conns[port]

    def close(self):
        for c in self.conns.values():
            c.close()
        self.conns, self.slots = {}, None

    def refresh(self):
        last = None
        for p in self.ports:
            try:
                ranges = self._conn(p)("CLUSTER", "SLOTS")
            except (OSError, ConnectionError, RuntimeError) as e:
                last = e
                continue
            slots = [None] * 16384
            for r in ranges:
                port = int(r[2][1])
                for s in range(int(r[0]), int(r[1]) + 1):
                    slots[s] = port
            self.slots = slots
            return
        raise ConnectionError(f"no cluster node answers CLUSTER SLOTS: {last!r}")

    def masters(self):
        if self.slots is None:
            self.refresh()
        return sorted({p for p in self.slots if p is not None})

    def __call__(self, *args):
        cmd = str(args[0]).upper()
        if cmd in self.ALL_MASTERS:
            out = [self._conn(p)(*args) for p in self.masters()]
            return sum(out) if cmd == "DBSIZE" else out[0]
        if cmd in ("EVAL", "EVALSHA"):
            key = args[3] if int(args[2]) > 0 else None
        else:
            key = args[1] if len(args) > 1 else None
        for _ in range(5):
            if self.slots is None:
                self.refresh()
            port = self.slots[key_slot(key)] if key is not None else self.masters()[0]
            try:
                return self._conn(port)(*args)
            except (OSError, ConnectionError):
                self.slots = None  # a failover: ask again
                time.sleep(0.2)
            except RuntimeError as e:
                if "MOVED" not in str(e) and "CLUSTERDOWN" not in str(e):
                    raise
                self.slots = None
                time.sleep(0.1)
        raise ConnectionError(f"cluster command {cmd} kept being redirected")

    def ask(self, *args):
        try:
            return self(*args)
        except RuntimeError as e:
            return ("ERR", str(e))

    def scan_keys(self, pattern):
        keys = []
        for p in self.masters():
            keys.extend(self._conn(p).scan_keys(pattern))
        return keys

    def int_values(self, pattern):
        out = {}
        for p in self.masters():
            out.update(self._conn(p).int_values(pattern))
        return out


# --------------------------------------------------------------------------- the stack


class Stack:
    def __init__(self, name="stack", cluster=None, redis_tls=None):
        self.build = _env_dir("ONSALE_BUILD_DIR")
        here = os.path.dirname(os.path.abspath(__file__))
        self.source = _env_dir("ONSALE_SOURCE_DIR", os.path.join(here, "..", ".."))
        self.script = os.path.join(self.source, "deploy", "onsale")
        self.reserve_bin = os.path.join(self.build, "reserve", "onsale-reserve")
        self.token_bin = os.path.join(self.build, "loadgen", "onsale-token")
        self.name = name
        self.root = None
        self.started = False
        self._redis = None
        self._key_pem = None
        self._kid = None
        self.ctx = None
        self.cluster = topology() == "cluster" if cluster is None else cluster
        self.redis_tls = (os.environ.get("ONSALE_IT_REDIS_TLS") == "1" if redis_tls is None
                          else redis_tls)
        self.redis_ssl = None  # the client context for Redis over TLS, once started

    # -- lifecycle

    def env(self):
        e = dict(os.environ)
        e.update({
            "ONSALE_STATE": self.state,
            "ONSALE_RESERVE_PORT": str(self.instance_reserve_port),
            "ONSALE_REDIS_PORT": str(self.redis_port),
            "ONSALE_PG_PORT": str(self.pg_port),
            "ONSALE_GATEWAY_PORT": str(self.gateway_port),
            "ONSALE_PAYSIM_PORT": str(self.paysim_port),
            "ONSALE_HAPROXY_PORT": str(self.haproxy_port),
            "ONSALE_TOPOLOGY": "cluster" if self.cluster else "single",
            "ONSALE_REDIS_TLS": "1" if self.redis_tls else "0",
            "ONSALE_BUILD": self.build,
            "ONSALE_SKIP_DEPS": "1",
            "ONSALE_SKIP_BUILD": "1",
            "ONSALE_SEED": "0",
            # The correctness suites run multi-threaded services (two workers each).
            "ONSALE_RESERVE_WORKERS": "2",
            "ONSALE_GATEWAY_WORKERS": "2",
            # Rooms the suites create bind no tickets to keys unless a test says "dpop":
            # their clients send no DPoP proofs (the gateway's default is true).
            "ONSALE_GATEWAY_DPOP_NEW_ROOMS": "false",
            # Rooms the suites create without "pow" join without a proof of work, as before
            # it existed (the gateway reads ONSALE_GATEWAY_<KEY>); test_gateway_pow.py,
            # test_openapi.py and the browser test turn it on per room and solve it.
            "ONSALE_GATEWAY_POW_NEW_ROOMS": "false",
        })
        return e

    # Environment variables that name this instance (its directory, ports, build) rather
    # than how its services are configured.
    _INSTANCE_VARS = ("ONSALE_STATE", "ONSALE_BUILD")

    def config_key(self):
        """What decides how this stack's services behave — the topology and every
        ONSALE_* variable env() gives them — with its own directory and ports left out
        (computed on a probe before any port is chosen): two stacks with equal keys are
        interchangeable for a test that uses fresh ids."""
        probe = object.__new__(type(self))
        probe.__dict__.update(self.__dict__)
        probe.state = "@state"
        for attr in ("instance_reserve_port", "reserve_port", "redis_port", "pg_port",
                     "gateway_port", "paysim_port", "haproxy_port"):
            setattr(probe, attr, 0)
        env = probe.env()
        return (self.cluster, self.redis_tls,
                tuple(sorted((k, v) for k, v in env.items()
                             if k.startswith("ONSALE_") and k not in self._INSTANCE_VARS)))

    def reset_provider(self):
        """The payment simulator back on its defaults (PUT /v1/settings {}): a module that
        changed them (a night's decline and timeout rates, a test's error rate) leaves a
        shared stack to the next module as a fresh one would be."""
        if not self.paysim_port:
            return
        c = Client(self.paysim_port, self.ctx, timeout=10)
        try:
            r = c.request("PUT", "/v1/settings", {})
        finally:
            c.close()
        if r.status != 200:
            raise RuntimeError(f"resetting the payment simulator: {r!r}")

    def healthy(self):
        """The reserve answers /readyz 200 (a shared stack is checked before reuse)."""
        if not self.started:
            return False
        c = self.client(timeout=5)
        try:
            return c.get("/readyz").status == 200
        except (OSError, ssl.SSLError, http.client.HTTPException):
            return False
        finally:
            c.close()

    def start(self):
        for path, what in ((self.script, "deploy/onsale"), (self.reserve_bin, "onsale-reserve"),
                           (self.token_bin, "onsale-token")):
            if not os.access(path, os.X_OK):
                raise RuntimeError(f"{what} not found or not executable: {path}")
        _raise_nofile()
        self.root = tempfile.mkdtemp(prefix=f"onsale-it-{self.name[:20]}-")
        # Services may drop privileges (Postgres refuses to run as root): let them in.
        os.chmod(self.root, 0o755)
        self.state = os.path.join(self.root, "state")
        os.mkdir(self.state, 0o755)
        if self.cluster:
            # deploy/onsale's cluster layout (see its usage): Redis base+0..5 (bus +10..15),
            # gateways base+16/+26, reserves base+17/+27, HAProxy base+18/+19
            base = _free_block(48)  # + the admin listeners at +36, +37, +46, +47
            self.redis_port, self.gateway_port, self.instance_reserve_port = base, base + 16, base + 17
            self.haproxy_port, self.pg_port, self.paysim_port = base + 18, base + 20, base + 21
            self.reserve_port = base + 19  # clients go through HAProxy
            self.redis_ports = list(range(base, base + 6))
            self.gateway_ports = [base + 16, base + 26]
            self.reserve_ports = [base + 17, base + 27]
            self.redis_seeds = ",".join(f"{HOST}:{p}" for p in self.redis_ports)
        else:
            self.reserve_port, self.gateway_port = _free_ports_with_admin(2)
            while True:
                (self.redis_port, self.pg_port, self.paysim_port,
                 self.haproxy_port) = _free_ports(4)
                taken = {self.reserve_port, self.gateway_port, self.reserve_port + ADMIN_OFFSET,
                         self.gateway_port + ADMIN_OFFSET}
                if not taken & {self.redis_port, self.pg_port, self.paysim_port,
                                self.haproxy_port}:
                    break
            self.instance_reserve_port = self.reserve_port
            self.redis_ports = [self.redis_port]
            self.redis_seeds = None
        log = os.path.join(self.root, "up.log")
        with open(log, "wb") as f:
            p = subprocess.run([self.script, "up"], cwd=self.source, env=self.env(), stdout=f,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               timeout=UP_TIMEOUT)
        self.started = True
        # deploy/onsale: each instance's admin listener is on its port + ADMIN_OFFSET
        self.reserve_admin_port = self.instance_reserve_port + ADMIN_OFFSET
        self.gateway_admin_port = self.gateway_port + ADMIN_OFFSET
        if p.returncode != 0:
            raise RuntimeError(f"deploy/onsale up failed ({p.returncode}):\n{self._tail(log)}")
        self.ca = os.path.join(self.state, "ca.pem")
        self.ctx = ssl.create_default_context(cafile=self.ca)
        if self.redis_tls:
            # deploy/onsale: Redis wants a client certificate from the dev CA; the stack's
            # server certificate is one (extendedKeyUsage clientAuth)
            self.redis_ssl = ssl.create_default_context(cafile=self.ca)
            self.redis_ssl.load_cert_chain(os.path.join(self.state, "server.pem"),
                                           os.path.join(self.state, "server-key.pem"))
        with open(os.path.join(self.state, "admin-token")) as f:
            self.admin_token = f.read().strip()  # the reserve's
        with open(os.path.join(self.state, "gateway-admin-token")) as f:
            self.gateway_admin_token = f.read().strip()
        # Redis (ACL users, default user off) and Postgres (scram-sha-256) need these.
        # redis_auth is the admin user (every key and command) the tests use; each
        # service has a user of its own with only what it needs (deploy/onsale
        # redis_acl_conf): redis_service_auth[name], redis_service_password_path[name].
        self.redis_user = "onsale"
        self.redis_password_path = os.path.join(self.state, "redis-password")
        with open(self.redis_password_path) as f:
            self.redis_auth = (self.redis_user, f.read().strip())
        self.redis_service_auth, self.redis_service_password_path = {}, {}
        for svc in ("gateway", "reserve"):
            path = os.path.join(self.state, f"redis-{svc}-password")
            with open(path) as f:
                self.redis_service_auth[svc] = (f"onsale-{svc}", f.read().strip())
            self.redis_service_password_path[svc] = path
        conf = "redis-1.conf" if self.cluster else "redis.conf"
        with open(os.path.join(self.state, conf)) as f:
            # "user NAME RULES..." as deploy/onsale wrote them: a private Redis of a test
            # gets the same users with redis-server --user NAME RULES...
            self.redis_acl_rules = {ln.split()[1]: ln.split()[1:] for ln in f
                                    if ln.startswith("user ")}
        self.pg_password_path = os.path.join(self.state, "pg-password")
        with open(self.pg_password_path) as f:
            self.pg_password = f.read().strip()
        self.key_path = os.path.join(self.state, "keys", "admission-1.pem")
        self.pub_path = os.path.join(self.state, "keys", "admission-pub.pem")
        self._wait_ready()

    def _wait_ready(self):
        def ready():
            c = self.client()
            try:
                return c.get("/readyz").status == 200
            finally:
                c.close()
        try:
            wait_for(ready, READY_TIMEOUT, interval=0.25, what="reserve /readyz 200")
        except AssertionError as e:
            raise RuntimeError(f"{e}\n{self.log_tails()}") from None

    def stop(self):
        if self._redis:
            self._redis.close()
        try:
            if self.started:
                log = os.path.join(self.root, "down.log")
                try:
                    with open(log, "wb") as f:
                        p = subprocess.run([self.script, "down"], cwd=self.source,
                                           env=self.env(), stdout=f, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, timeout=DOWN_TIMEOUT)
                    if p.returncode != 0:
                        sys.stderr.write(f"[stack] deploy/onsale down failed ({p.returncode}):\n"
                                         f"{self._tail(log)}\n")
                except subprocess.TimeoutExpired:
                    sys.stderr.write("[stack] deploy/onsale down timed out\n")
                self._kill_leftovers()
            if os.environ.get("ONSALE_IT_LOGS") == "1":
                sys.stderr.write(self.log_tails())
        finally:
            if self.root and os.environ.get("ONSALE_IT_KEEP_STATE") != "1":
                shutil.rmtree(self.root, ignore_errors=True)
            elif self.root:
                sys.stderr.write(f"[stack] kept {self.root}\n")

    def _kill_leftovers(self):
        """Processes that `down` left running and that belong to this stack (started
        with our ONSALE_STATE in their environment or command line), by pid."""
        mine = []
        tag = self.state.encode()
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = f.read()
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            if b"ONSALE_STATE=" + tag + b"\0" in env or tag in cmd:
                mine.append(int(pid))
        if not mine:
            return
        sys.stderr.write(f"[stack] down left processes {mine}; terminating them\n")
        for pid in mine:
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(os.path.exists(f"/proc/{p}") for p in mine):
            time.sleep(0.1)
        for pid in mine:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    @staticmethod
    def _tail(path, n=60):
        try:
            with open(path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
            return "\n".join(lines[-n:])
        except OSError as e:
            return f"({path}: {e})"

    def log_tails(self, n=40):
        out = []
        for dirpath, _, files in os.walk(self.root or "/nonexistent"):
            for fn in sorted(files):
                if fn.endswith(".log"):
                    p = os.path.join(dirpath, fn)
                    out.append(f"----- {p} (last {n} lines)\n{self._tail(p, n)}")
        return "\n".join(out) + "\n"

    # -- clients

    @property
    def reserve_names(self):
        """deploy/onsale's names of the reserve processes (their NAME.conf in the state
        directory, run/NAME.pid): reserve-1, reserve-2 in the cluster topology."""
        return ["reserve-1", "reserve-2"] if self.cluster else ["reserve"]

    @property
    def gateway_names(self):
        return ["gateway-1", "gateway-2"] if self.cluster else ["gateway"]

    def pids(self, names):
        out = []
        for n in names:
            with open(os.path.join(self.state, "run", f"{n}.pid")) as f:
                out.append(int(f.read().split()[0]))
        return out

    def client(self, timeout=HTTP_TIMEOUT):
        return Client(self.reserve_port, self.ctx, timeout=timeout)

    def admin_client(self, timeout=HTTP_TIMEOUT):
        """The reserve's admin listener (admin API, /metrics)."""
        return Client(self.reserve_admin_port, self.ctx, timeout=timeout)

    def oversized(self, path, token, size, timeout=15):
        """POSTs a body of `size` bytes (Content-Length announced up front), reading the
        answer while sending so that an early refusal is seen. Returns a Response
        (.error set when no answer came) with .sent = bytes of body written."""
        return asyncio.run(_oversized(self.reserve_port, self.ctx, path, token, size, timeout))

    def raw_tls(self, handshake=True):
        """A connected blocking socket to reserve (TLS handshake done unless
        handshake=False): for slow and broken clients."""
        s = socket.create_connection((HOST, self.reserve_port), timeout=10)
        if handshake:
            s = self.ctx.wrap_socket(s, server_hostname=HOST)
        return s

    def admin(self, method, path, body=None):
        c = self.admin_client()
        try:
            return c.request(method, path, body=body, token=self.admin_token)
        finally:
            c.close()

    def gateway_admin(self, method, path, body=None):
        """A request to the stack's gateway admin listener with the gateway's token."""
        c = Client(self.gateway_admin_port, self.ctx)
        try:
            return c.request(method, path, body=body, token=self.gateway_admin_token)
        finally:
            c.close()

    def create_event(self, event, **spec):
        spec.setdefault("currency", "EUR")
        r = self.admin("PUT", f"/admin/events/{event}", spec)
        if r.status not in (200, 201):
            raise AssertionError(f"creating event {event} failed: {r!r}")
        # No wait on the cluster either: once the PUT has answered, every reserve knows the
        # event (the catalogue generation, rsv_catalog.h; test_cluster_catalog).
        return r

    @property
    def redis(self):
        if self._redis is None:
            self._redis = self.new_redis()
        return self._redis

    def new_redis(self):
        """A Redis client of its own (one per thread): cluster-aware in the cluster
        topology."""
        if self.cluster:
            return ClusterRedis(self.redis_ports, auth=self.redis_auth, ssl_ctx=self.redis_ssl)
        return Redis(self.redis_port, auth=self.redis_auth, ssl_ctx=self.redis_ssl)

    def sql(self, query):
        """Rows of a query, each a list of text fields (psql -At, '|' separated)."""
        # the cluster topology: both Postgres nodes, the one that takes writes (a failover
        # moves the primary: deploy/lib/pg_cluster.sh)
        hosts, ports = HOST, str(self.pg_port)
        if self.cluster:
            hosts, ports = f"{HOST},{HOST}", f"{self.pg_port},{self.pg_port + 10}"
        p = subprocess.run(["psql", "-h", hosts, "-p", ports, "-U", "onsale",
                            "-X", "-v", "ON_ERROR_STOP=1", "onsale", "-Atc", query],
                           capture_output=True, timeout=30,
                           env=dict(os.environ, PGCONNECT_TIMEOUT="10",
                                    PGTARGETSESSIONATTRS="read-write",
                                    PGPASSWORD=self.pg_password))
        if p.returncode != 0:
            raise AssertionError(f"psql failed: {query}\n{p.stderr.decode()}")
        text = p.stdout.decode()
        return [line.split("|") for line in text.splitlines() if line != ""]

    def sql_value(self, query):
        rows = self.sql(query)
        return rows[0][0] if rows else None

    def burst(self, reqs, connect_concurrency=100, timeout=60):
        """Opens one TLS connection per request first, then fires every request at
        once and returns the Responses (with .latency) in request order."""
        return self.bursts([reqs], connect_concurrency, timeout)[0]

    def bursts(self, batches, connect_concurrency=100, timeout=60):
        """Like burst, for several batches fired one after another over the same
        pre-opened connections (as many as the largest batch)."""
        return asyncio.run(_bursts(self.reserve_port, self.ctx, batches, connect_concurrency,
                                   timeout))

    def req(self, method, path, token=None, body=None, raw=None, headers=None):
        return build_request(method, path, token, body, raw, headers, self.reserve_port)

    def metrics(self):
        """{name: [(labels, value)]} from /metrics (of every reserve instance in the
        cluster topology: metric_sum then adds their counters up)."""
        text = ""
        for port in (self.reserve_ports if self.cluster else [self.instance_reserve_port]):
            c = Client(port + ADMIN_OFFSET, self.ctx)
            try:
                r = c.get("/metrics")
            finally:
                c.close()
            if r.status != 200:
                raise AssertionError(f"/metrics: {r!r}")
            text += r.body.decode() + "\n"
        return parse_metrics(text)

    # -- tokens

    def token(self, event, sub, ttl=600, nbf_offset=None, aud=None):
        args = [self.token_bin, "--key", self.key_path, "--event", event, "--sub", sub,
                "--ttl", str(ttl)]
        if nbf_offset is not None:
            args += ["--nbf-offset", str(nbf_offset)]
        if aud is not None:
            args += ["--aud", aud]
        p = subprocess.run(args, capture_output=True, timeout=30)
        if p.returncode != 0:
            raise AssertionError(f"onsale-token failed: {args}\n{p.stderr.decode()}")
        return p.stdout.decode().strip()

    def tokens(self, event, sub_prefix, n, ttl=600):
        """n tokens for subs <prefix>-1 … <prefix>-n."""
        args = [self.token_bin, "--key", self.key_path, "--event", event, "--sub", sub_prefix,
                "--ttl", str(ttl), "--count", str(n)]
        p = subprocess.run(args, capture_output=True, timeout=120)
        if p.returncode != 0:
            raise AssertionError(f"onsale-token failed: {args}\n{p.stderr.decode()}")
        toks = p.stdout.decode().split()
        if len(toks) != n:
            raise AssertionError(f"onsale-token --count {n} printed {len(toks)} tokens")
        return toks

    @property
    def private_key(self):
        if self._key_pem is None:
            with open(self.key_path, "rb") as f:
                self._key_pem = f.read()
        return self._key_pem

    @property
    def public_key_pem(self):
        with open(self.pub_path, "rb") as f:
            return f.read()

    @property
    def kid(self):
        """The kid reserve expects, learnt from a token onsale-token minted."""
        if self._kid is None:
            hdr, _ = jwt_parts(self.token("kid-probe", "kid-probe"))
            self._kid = hdr.get("kid")
        return self._kid

    def claims(self, event, sub, ttl=600):
        """Claims like onsale-token's (taken from one it minted), ready to tamper with."""
        _, c = jwt_parts(self.token(event, sub, ttl=ttl))
        c["jti"] = uuid.uuid4().hex
        return c

    def sign(self, claims, key=None, alg="ES256", headers=None):
        """A JWT signed with PyJWT (default: the real admission key and kid)."""
        import jwt  # python3-jwt
        hdr = {"kid": self.kid}
        if headers:
            hdr.update(headers)
        return jwt.encode(claims, key if key is not None else self.private_key, algorithm=alg,
                          headers=hdr)

    def forge_raw(self, header, claims, signer):
        """header.claims.signature where signature = signer(signing_input bytes)."""
        h = b64url(json.dumps(header, separators=(",", ":")).encode())
        p = b64url(json.dumps(claims, separators=(",", ":")).encode())
        sig = signer(f"{h}.{p}".encode())
        return f"{h}.{p}.{b64url(sig)}"

    def hs256_with(self, claims, secret):
        return self.forge_raw({"alg": "HS256", "typ": "JWT", "kid": self.kid}, claims,
                              lambda m: hmac.new(secret, m, hashlib.sha256).digest())


def parse_metrics(text):
    out = collections.defaultdict(list)
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)", line)
        if not m:
            continue
        labels = {}
        if m.group(2):
            for k, v in re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2)):
                labels[k] = v
        try:
            out[m.group(1)].append((labels, float(m.group(3))))
        except ValueError:
            pass
    return dict(out)


def metric_sum(metrics, name, **match):
    return sum(v for labels, v in metrics.get(name, [])
               if all(labels.get(k) == str(x) for k, x in match.items()))


# --------------------------------------------------------------------------- JSON helpers


def find_entry(doc, ident):
    """The first dict in doc (recursively) whose id/name/pool/seat/section field equals
    ident, or whose parent maps ident to it; None if absent."""
    if isinstance(doc, dict):
        for k in ("id", "seat", "pool", "section", "name"):
            if doc.get(k) == ident:
                return doc
        if ident in doc and isinstance(doc[ident], (dict, str, int, float)):
            return doc[ident]
        for v in doc.values():
            f = find_entry(v, ident)
            if f is not None:
                return f
    elif isinstance(doc, list):
        for v in doc:
            f = find_entry(v, ident)
            if f is not None:
                return f
    return None


def numbers(doc, path=""):
    """Every (path, number) in a JSON document."""
    if isinstance(doc, bool):
        return []
    if isinstance(doc, (int, float)):
        return [(path, doc)]
    if isinstance(doc, dict):
        return [x for k, v in doc.items() for x in numbers(v, f"{path}.{k}")]
    if isinstance(doc, list):
        return [x for i, v in enumerate(doc) for x in numbers(v, f"{path}[{i}]")]
    return []


def seat_state(seatmap, seat):
    e = find_entry(seatmap, seat)
    if isinstance(e, str):
        return e
    if isinstance(e, dict):
        return e.get("state") or e.get("status")
    return None


def pool_available(avail, pool):
    e = find_entry(avail, pool)
    if isinstance(e, dict):
        return e.get("available")
    if isinstance(e, (int, float)) and not isinstance(e, bool):
        return e
    return None


# --------------------------------------------------------------------------- unittest glue


def sharing():
    """ONSALE_IT_SHARE_STACKS=1: modules of this process share equally configured stacks."""
    return os.environ.get("ONSALE_IT_SHARE_STACKS") == "1"


def _stop_shared():
    for st in list(_SHARED.values()):
        try:
            st.stop()
        finally:
            shadow = getattr(st, "shadow", None)
            if shadow:
                shutil.rmtree(shadow, ignore_errors=True)
    _SHARED.clear()


def _log_module_time(name):
    """At the end of the calling module (call from setUpModule): how long it took, stack
    and tests ("[stack] NAME: module done in N s", in ctest's LastTest.log) — the figures
    for keeping CI's run within its time."""
    t0 = time.monotonic()
    unittest.addModuleCleanup(lambda: sys.stderr.write(
        f"[stack] {name}: module done in {time.monotonic() - t0:.0f} s\n"))


def acquire(s, kind, start=None):
    """s started (by start(), default s.start), or — when sharing and a healthy stack of
    the same kind and config_key() is running — that one. Pair with release().
    Called from setUpModule (like module_own_stack), it logs the module's time."""
    _log_module_time(s.name)
    key = (kind, s.config_key()) if sharing() else None
    if key is not None:
        old = _SHARED.get(key)
        if old is not None and old.healthy():
            sys.stderr.write(f"[stack] {s.name}: sharing the running stack {old.name} "
                             f"({old.root})\n")
            old.reset_provider()
            return old
        if old is not None:
            sys.stderr.write(f"[stack] shared stack {old.root} is not ready; starting another\n")
            del _SHARED[key]
            old.stop()
    (start or s.start)()
    if key is not None:
        if not _SHARED:
            atexit.register(_stop_shared)
        _SHARED[key] = s
    return s


def release(s):
    """Stops s unless it is shared (then it goes down when the process exits)."""
    if s not in _SHARED.values():
        s.stop()
        return False
    return True


def module_stack(name=None, s=None):
    """Starts a stack for the calling module (call from setUpModule), or takes the
    process's equally configured one when sharing; its teardown is registered first, so
    it runs even when start-up fails half way. s: a Stack (subclass) built by the caller,
    else a plain Stack named name."""
    global _CURRENT
    if s is None:
        s = Stack(name or "stack")
    taken = [s]

    def cleanup():
        global _CURRENT
        _CURRENT = None
        release(taken[0])

    unittest.addModuleCleanup(cleanup)
    _CURRENT = s
    taken[0] = _CURRENT = acquire(s, "stack")
    return _CURRENT


def module_own_stack(s):
    """Starts s for the calling module alone (call from setUpModule; never shared), its
    teardown registered first; returns it."""
    global _CURRENT

    def cleanup():
        global _CURRENT
        _CURRENT = None
        s.stop()

    unittest.addModuleCleanup(cleanup)
    _log_module_time(s.name)
    _CURRENT = s
    s.start()
    return s


@contextlib.contextmanager
def env_set(env):
    """os.environ with env's keys set for the with block, as it was afterwards."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def new_id(prefix="ev"):
    return f"{prefix}-{uuid.uuid4().hex[:20]}"


class ReserveTestCase(unittest.TestCase):
    maxDiff = 4000

    @property
    def S(self):
        if _CURRENT is None:
            raise RuntimeError("no stack: call stack.module_stack() in setUpModule")
        return _CURRENT

    def setUp(self):
        self.c = self.S.client()
        self.addCleanup(self.c.close)
        self.a = self.S.admin_client()  # admin API and /metrics
        self.addCleanup(self.a.close)

    def new_event(self, prefix="ev", **spec):
        ev = new_id(prefix)
        r = self.S.create_event(ev, **spec)
        self.assertEqual(r.status, 201, f"PUT /admin/events/{ev}: {r!r}")
        return ev

    def assertStatus(self, resp, status, error=None, msg=""):
        want = f"{status}" + (f" {{'error': {error!r}}}" if error else "")
        self.assertEqual(resp.status, status, f"{msg} expected {want}, got {resp!r}")
        if error is not None:
            self.assertIsInstance(resp.json, dict, f"{msg} error body is not JSON: {resp!r}")
            self.assertEqual(resp.err, error, f"{msg} expected {want}, got {resp!r}")
            self.assertIsInstance(resp.json.get("message"), str,
                                  f"{msg} error without a message: {resp!r}")

    def hold(self, event, token, seats=None, pool=None, quantity=None, expect=201):
        body = {"seats": seats} if seats is not None else {"pool": pool, "quantity": quantity}
        r = self.c.post(f"/v1/events/{event}/holds", body, token=token)
        if expect is not None:
            self.assertStatus(r, expect, msg="hold:")
        return r

    def confirm(self, hold_id, token, amount, key=None, currency="EUR", source="tok_visa"):
        key = key or uuid.uuid4().hex
        body = {"payment": {"amount": amount, "currency": currency, "source": source}}
        return self.c.post(f"/v1/holds/{hold_id}/confirm", body, token=token,
                           headers={"Idempotency-Key": key})

    def wait_json(self, path, pred, timeout=5, what=None):
        """Polls GET path (no token) until pred(json) holds; returns the json."""
        def check():
            r = self.c.get(path)
            if r.status == 200 and r.json is not None and pred(r.json):
                return r.json
            return None
        return wait_for(check, timeout, interval=0.1, what=what or f"GET {path}")


def redis_as(S, service):
    """A Redis client authenticated as a service's own ACL user (deploy/onsale)."""
    auth = S.redis_service_auth[service]
    if S.cluster:
        # the services' users may not run CLUSTER SLOTS: the admin's map routes for them
        c = ClusterRedis(S.redis_ports, auth=auth, ssl_ctx=S.redis_ssl)
        S.redis.masters()
        c.slots = list(S.redis.slots)
        return c
    return Redis(S.redis_port, auth=auth, ssl_ctx=S.redis_ssl)


def note(msg):
    """A line on stderr next to the verbose test output (burst outcomes, latencies)."""
    sys.stderr.write(f"\n    [{msg}] ")
    sys.stderr.flush()


def summarize(results):
    """'201×1, 409 seat_unavailable×999' style summary plus latency percentiles."""
    cnt = collections.Counter(
        (r.status, r.err) if r.status is not None else ("transport", r.error) for r in results)
    parts = [f"{s} {e or ''}".strip() + f"×{n}" for (s, e), n in sorted(cnt.items(), key=str)]
    lats = sorted(r.latency for r in results if r.latency is not None)
    if lats:
        pct = lambda q: lats[min(len(lats) - 1, int(q * len(lats)))]  # noqa: E731
        parts.append(f"latency p50={pct(.5):.3f}s p99={pct(.99):.3f}s max={lats[-1]:.3f}s")
    return ", ".join(parts)
