"""deploy/onsale tidied (item 9):

- `up` asks only for what running the stack needs: nginx, HAProxy (outside the cluster
  topology), Prometheus, wrk, chromium, clang-format… come with `deps` and `test`, so
  `up` on a systemd host does not install (and start) test and benchmark services;
- every admin link `up` prints answers 200 or 401 (never 404);
- ONSALE_LISTEN takes 127.0.0.1 or 0.0.0.0 only, and is refused before anything starts.

The package lists are read by running the script with a fake dpkg-query (nothing is
installed) and a fake id (not root): `deps` then prints what it would install and exits,
without touching apt.
"""

import os
import re
import subprocess
import tempfile
import unittest

import stack

SOURCE = stack._env_dir("ONSALE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(SOURCE, "deploy", "onsale")

# Only tests, lint checks, the package build or benchmarks use these.
TEST_ONLY = {"nginx-light", "haproxy", "prometheus", "wrk", "chromium", "npm", "nodejs",
             "clang-format", "jq", "libnss3-tools", "python3-yaml", "python3-jsonschema",
             "dpkg-dev", "debhelper", "fakeroot"}


def fake_bin(d):
    """A PATH directory where nothing is installed and the caller is not root."""
    for name, body in (("dpkg-query", "exit 1"), ("id", 'echo 1000'),
                       ("apt-get", 'echo "apt-get must not run" >&2; exit 99')):
        path = os.path.join(d, name)
        with open(path, "w") as f:
            f.write(f"#!/bin/sh\n{body}\n")
        os.chmod(path, 0o755)


class Deps(unittest.TestCase):
    def asked(self, *args, **env):
        """The packages `deploy/onsale ARGS` says are missing (it exits 1 without root)."""
        with tempfile.TemporaryDirectory() as d:
            fake_bin(d)
            e = {k: v for k, v in os.environ.items() if not k.startswith("ONSALE_")}
            e.update(env, PATH=d + ":" + os.environ["PATH"],
                     ONSALE_STATE=os.path.join(d, "state"), ONSALE_SKIP_BUILD="1")
            p = subprocess.run([SCRIPT, *args], cwd=SOURCE, env=e, capture_output=True,
                               text=True, stdin=subprocess.DEVNULL, timeout=60)
            self.assertFalse(os.path.exists(os.path.join(d, "state", "run")))
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertNotIn("apt-get must not run", p.stderr)
        m = re.search(r"missing packages: (.*)", p.stderr)
        self.assertIsNotNone(m, p.stderr)
        return set(m.group(1).split())

    def test_up_installs_only_what_running_needs(self):
        up = self.asked("up")
        self.assertFalse(up & TEST_ONLY, f"up installs test/bench tools: {sorted(up & TEST_ONLY)}")
        for need in ("redis-server", "postgresql", "openssl", "curl", "cmake", "libevent-dev"):
            self.assertIn(need, up)

    def test_cluster_up_adds_haproxy(self):
        up = self.asked("up", ONSALE_TOPOLOGY="cluster")
        self.assertIn("haproxy", up)
        self.assertFalse(up & (TEST_ONLY - {"haproxy"}))

    def test_deps_installs_everything_ci_needs(self):
        every = self.asked("deps")
        for tool in ("nginx-light", "haproxy", "prometheus", "wrk", "clang-format", "jq",
                     "python3-yaml", "python3-jsonschema", "dpkg-dev"):
            self.assertIn(tool, every)
        self.assertTrue(self.asked("up") < every)

    def test_test_deps_cover_what_up_leaves_out(self):
        # `test` on a machine that only ran `up` must still get the test tools: its
        # test_deps installs TEST_PACKAGES (and chromium, best effort)
        text = ""
        for part in ("onsale", "lib/packages.sh"):  # the entry point and its packages part
            with open(os.path.join(SOURCE, "deploy", part)) as f:
                text += f.read()
        body = text[text.index("test_deps() {"):]
        body = body[:body.index("\n}\n")]
        self.assertIn('"${TEST_PACKAGES[@]}" chromium libnss3-tools', body)
        self.assertIn("test_deps", text[text.index("cmd_test() {"):][:400])

    def test_listen_is_checked_before_anything_starts(self):
        with tempfile.TemporaryDirectory() as d:
            e = dict(os.environ, ONSALE_STATE=os.path.join(d, "state"), ONSALE_SKIP_DEPS="1",
                     ONSALE_SKIP_BUILD="1", ONSALE_LISTEN="10.1.2.3")
            p = subprocess.run([SCRIPT, "up"], cwd=SOURCE, env=e, capture_output=True,
                               text=True, stdin=subprocess.DEVNULL, timeout=60)
            self.assertEqual(p.returncode, 1)
            self.assertIn("ONSALE_LISTEN='10.1.2.3': expected 127.0.0.1", p.stderr)
            self.assertFalse(os.path.exists(os.path.join(d, "state", "run")))


class AdminLinks(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.S = stack.module_stack("tidy")

    def test_every_admin_link_answers(self):
        with open(os.path.join(self.S.root, "up.log"), errors="replace") as f:
            summary = f.read()
        links = re.findall(r"^  admin\s+(https://\S+)", summary, re.M)
        self.assertEqual(len(links), 2, summary[-2000:])
        tokens = {self.S.reserve_admin_port: self.S.admin_token,
                  self.S.gateway_admin_port: self.S.gateway_admin_token}
        for url in links:
            m = re.match(r"https://127\.0\.0\.1:(\d+)(/\S*)", url)
            self.assertIsNotNone(m, url)
            port, path = int(m.group(1)), m.group(2)
            self.assertIn(port, tokens, url)
            c = stack.Client(port, self.S.ctx)
            try:
                bare = c.get(path)
                authed = c.get(path, token=tokens[port])
            finally:
                c.close()
            self.assertIn(bare.status, (200, 401), f"{url}: {bare!r}")
            self.assertEqual(authed.status, 200, f"{url} with its token: {authed!r}")


if __name__ == "__main__":
    unittest.main()
