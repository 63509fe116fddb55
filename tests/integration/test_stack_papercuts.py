"""deploy/onsale's papercuts found from a fresh clone:

- an `up` that fails part-way stops what it had started, so the next `up` (even with a
  new state directory) does not meet "port in use" from a Redis left behind;
- `up` as root from a checkout under a directory only root can enter (/root/…, 0700)
  places Postgres' data where user postgres can reach it instead of failing.
"""

import hashlib
import os
import shutil
import socket
import subprocess
import tempfile
import unittest

import stack
from stack import HOST

SOURCE = stack._env_dir("ONSALE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(SOURCE, "deploy", "onsale")


def onsale(state, ports, *args, timeout=240):
    env = dict(os.environ, ONSALE_STATE=state, ONSALE_SKIP_DEPS="1", ONSALE_SKIP_BUILD="1",
               ONSALE_INFRA_ONLY="1", ONSALE_SEED="0",
               ONSALE_BUILD=os.environ.get("ONSALE_BUILD_DIR", os.path.join(SOURCE, "build")))
    env.pop("ONSALE_TOPOLOGY", None)
    for k, v in ports.items():
        env[f"ONSALE_{k}_PORT"] = str(v)
    return subprocess.run([SCRIPT, *args], cwd=SOURCE, env=env, capture_output=True,
                          stdin=subprocess.DEVNULL, timeout=timeout)


def listening(port):
    try:
        with socket.create_connection((HOST, port), timeout=1):
            return True
    except OSError:
        return False


class Papercuts(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="onsale-papercut-")
        os.chmod(self.root, 0o755)
        p = stack._free_ports(6)
        self.ports = dict(zip(("RESERVE", "REDIS", "PG", "GATEWAY", "PAYSIM", "HAPROXY"), p))
        self.states = []

    def tearDown(self):
        for st in self.states:
            onsale(st, self.ports, "down")
        shutil.rmtree(self.root, ignore_errors=True)

    def test_failed_up_stops_what_it_started(self):
        st1 = os.path.join(self.root, "one")
        self.states.append(st1)
        blocker = socket.socket()
        blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        blocker.bind((HOST, self.ports["PG"]))
        blocker.listen(1)  # Postgres cannot start: its port is taken
        try:
            p = onsale(st1, self.ports, "up")
        finally:
            blocker.close()
        out = p.stdout.decode() + p.stderr.decode()
        self.assertNotEqual(p.returncode, 0, out)
        self.assertIn("cannot start postgres", out)
        self.assertIn("up failed: stopping what it started (redis)", out)
        self.assertFalse(listening(self.ports["REDIS"]), "the Redis it started still runs")
        # the next `up`, with a new state directory and the same ports, just works
        st2 = os.path.join(self.root, "two")
        self.states.append(st2)
        p = onsale(st2, self.ports, "up")
        self.assertEqual(p.returncode, 0, p.stdout.decode() + p.stderr.decode())
        self.assertTrue(listening(self.ports["REDIS"]) and listening(self.ports["PG"]))

    @unittest.skipUnless(os.geteuid() == 0, "needs root (user postgres must be unable to "
                         "enter the checkout)")
    def test_root_checkout_under_private_directory(self):
        private = os.path.join(self.root, "private")
        os.mkdir(private, 0o700)  # like /root: only root may enter
        st = os.path.join(private, "checkout", ".onsale")
        self.states.append(st)
        alt = "/var/lib/onsale/pg-" + hashlib.sha256(st.encode()).hexdigest()[:16]
        self.addCleanup(shutil.rmtree, alt, True)
        p = onsale(st, self.ports, "up")
        out = p.stdout.decode() + p.stderr.decode()
        self.assertEqual(p.returncode, 0, out)
        self.assertIn(f"its data goes to {alt}", out)
        self.assertTrue(os.path.exists(os.path.join(alt, "data", "PG_VERSION")))
        with open(os.path.join(st, "pg-password")) as f:
            pw = f.read().strip()
        q = subprocess.run(["psql", "-h", HOST, "-p", str(self.ports["PG"]), "-U", "onsale",
                            "-d", "onsale", "-Atc", "select 1"], capture_output=True, timeout=30,
                           env=dict(os.environ, PGPASSWORD=pw))
        self.assertEqual(q.stdout.strip(), b"1", q.stderr)
        s = onsale(st, self.ports, "status")
        self.assertRegex(s.stdout.decode(), r"postgres\s+running")
        d = onsale(st, self.ports, "down")
        self.assertEqual(d.returncode, 0, d.stderr.decode())
        self.assertFalse(listening(self.ports["PG"]))
        self.states.remove(st)


if __name__ == "__main__":
    unittest.main()
