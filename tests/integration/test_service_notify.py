"""systemd Type=notify without systemd: each service is started the way a unit would,
with a NOTIFY_SOCKET of this test's own (a datagram socket) and WATCHDOG_USEC, and the
test reads what it says. READY=1 only once every worker is ready (its Redis and
Postgres reachable: /readyz answers 200 then); WATCHDOG=1 again and again while the
loops run; RELOADING=1 then READY=1 around a SIGHUP; STOPPING=1 at SIGTERM. A service
whose Redis is unreachable never says READY (the unit's start times out instead of
sending traffic to it)."""

import os
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import unittest

import stack

WATCHDOG_USEC = 1_000_000  # pings every 250 ms, each loop must check in within 500 ms
BOUND = 20                 # seconds any one expected message may take


S = None


def setUpModule():
    global S
    S = stack.module_stack("notify")


class Listener:
    """The manager's end: an AF_UNIX datagram socket, read with a deadline."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="onsale-notify-")
        self.path = os.path.join(self.dir, "notify.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.seen = []

    def next(self, deadline):
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        self.sock.settimeout(left)
        try:
            msg = self.sock.recv(4096).decode()
        except socket.timeout:
            return None
        self.seen.append(msg)
        return msg

    def wait_for(self, field, bound=BOUND, on_each=None):
        """Reads until a message holds the line `field`; returns the messages before it."""
        deadline = time.monotonic() + bound
        before = []
        while True:
            msg = self.next(deadline)
            if msg is None:
                raise AssertionError(f"no {field} within {bound}s; got {self.seen}")
            if on_each:
                on_each(msg)
            if field in msg.split("\n"):
                return before
            before.append(msg)

    def close(self):
        self.sock.close()
        os.unlink(self.path)
        os.rmdir(self.dir)


class NotifyCase(unittest.TestCase):
    service = None  # "reserve" | "gateway"

    def setUp(self):
        self.S = S
        if self.S.cluster:
            self.skipTest("one process against one stack; the topology does not matter")
        self.bin = os.path.join(self.S.build, self.service, f"onsale-{self.service}")
        if not os.access(self.bin, os.X_OK):
            self.skipTest(f"{self.bin} not built")
        self.n = Listener()
        self.addCleanup(self.n.close)
        self.port, admin = stack._free_ports(2)
        self.args = [self.bin, "--config", os.path.join(self.S.state, f"{self.service}.conf"),
                     f"--port={self.port}", f"--admin_listen=127.0.0.1:{admin}", "--workers=2"]

    def start(self, *extra):
        env = dict(os.environ, NOTIFY_SOCKET=self.n.path, WATCHDOG_USEC=str(WATCHDOG_USEC))
        log = open(os.path.join(self.S.root, f"notify-{self.service}.log"), "ab")
        self.addCleanup(log.close)
        p = subprocess.Popen(self.args + list(extra), env=env, stdout=log,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

        def stop():
            if p.poll() is None:
                p.kill()
                p.wait(10)
        self.addCleanup(stop)
        return p

    def readyz(self):
        c = stack.Client(self.port, self.S.ctx, timeout=5)
        try:
            return c.get("/readyz").status
        except (OSError, ssl.SSLError):
            return None
        finally:
            c.close()

    def test_ready_watchdog_reload_stopping(self):
        p = self.start()
        before = self.n.wait_for("READY=1")
        self.assertFalse([m for m in before if "WATCHDOG=1" in m and "READY=1" in m], before)
        # READY means every worker can serve: /readyz (asked of any worker) says so at once
        self.assertEqual(self.readyz(), 200, "READY=1 sent before /readyz answers 200")
        for _ in range(3):
            self.n.wait_for("WATCHDOG=1", bound=5)
        os.kill(p.pid, signal.SIGHUP)
        self.n.wait_for("RELOADING=1")
        between = self.n.wait_for("READY=1")
        self.assertFalse([m for m in between if "READY=1" in m.split("\n")], between)
        self.n.wait_for("WATCHDOG=1", bound=5)  # the loops still run after the reload
        os.kill(p.pid, signal.SIGTERM)
        self.n.wait_for("STOPPING=1")
        self.assertEqual(p.wait(60), 0)

    def test_no_ready_while_redis_unreachable(self):
        (dead,) = stack._free_ports(1)
        p = self.start(f"--redis_port={dead}", "--redis_host=127.0.0.1")
        ready = []
        deadline = time.monotonic() + 3
        while (msg := self.n.next(deadline)) is not None:
            ready += [msg] if "READY=1" in msg.split("\n") else []
        self.assertEqual(ready, [], f"READY=1 with Redis down: {self.n.seen}")
        self.assertIsNone(p.poll(), "the service exited instead of waiting for Redis")
        os.kill(p.pid, signal.SIGTERM)
        p.wait(60)


class Reserve(NotifyCase):
    service = "reserve"


class Gateway(NotifyCase):
    service = "gateway"


del NotifyCase

if __name__ == "__main__":
    unittest.main()
