"""The Debian package, end to end, on this machine (ctest package.deb, label package; the
normal CI pass only, as root).

Builds the .deb from a copy of the source tree (dpkg-buildpackage -b: debian/rules, the
CMake install() rules), installs it with dpkg -i, and runs what it installed the way
systemd would: each unit's ExecStart= line (with %i = 1), as its User=, with its
LoadCredential= files copied into a $CREDENTIALS_DIRECTORY readable by that user only,
and a NOTIFY_SOCKET of the test's own (these machines run no systemd as PID 1). The
installed /etc/onsale configs are edited as an operator would (the test Redis and
Postgres of `deploy/onsale up` with ONSALE_INFRA_ONLY=1, ports, certificates,
credential: names). Then a fan's journey through the installed binaries: join the
room, get admitted, hold a seat with the admission token, confirm (paid through the
installed payment simulator). Teardown stops everything and purges the package.
"""

import fcntl
import glob
import json
import os
import pwd
import re
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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import stack  # noqa: E402  (Client, wait_for, free ports)
from dpop_key import DPoPKey  # noqa: E402  (a client's DPoP key, docs/api.md)


SOURCE = os.path.abspath(os.environ.get("ONSALE_SOURCE_DIR", os.path.join(HERE, "..", "..")))
UNITS = "/lib/systemd/system"
ETC = "/etc/onsale"
LOCK = "/run/lock/onsale-package-test.lock"


def run(cmd, **kw):
    kw.setdefault("check", True)
    return subprocess.run(cmd, stdin=subprocess.DEVNULL, **kw)


def unit_lines(unit, key):
    """The values of key= in an installed unit, in order."""
    with open(os.path.join(UNITS, unit)) as f:
        return [ln.split("=", 1)[1].strip() for ln in f if ln.startswith(key + "=")]


def set_keys(path, values):
    """Sets `key = value` in an installed config: replaces the key's line (commented
    out or not), appends it otherwise — what an operator's edit does."""
    with open(path) as f:
        lines = f.read().split("\n")
    for key, value in values.items():
        pat = re.compile(rf"^#?\s*{re.escape(key)}\s*=")
        line = f"{key} = {value}"
        for i, ln in enumerate(lines):
            if pat.match(ln):
                lines[i] = line
                break
        else:
            lines.append(line)
    with open(path, "w") as f:
        f.write("\n".join(lines))


def install_file(src, dst, mode, owner="root"):
    shutil.copyfile(src, dst)
    pw = pwd.getpwnam(owner)
    os.chown(dst, pw.pw_uid, pw.pw_gid)
    os.chmod(dst, mode)


@unittest.skipUnless(os.geteuid() == 0, "installs a package: needs root")
class Package(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.lock = open(LOCK, "w")
        fcntl.flock(cls.lock, fcntl.LOCK_EX)
        cls.tmp = tempfile.mkdtemp(prefix="onsale-pkg-")
        os.chmod(cls.tmp, 0o755)
        cls.procs = []
        cls.infra_env = None
        cls.addClassCleanup(cls.teardown_all)
        cls.deb = cls.build_deb()
        run(["dpkg", "-i", cls.deb], stdout=subprocess.DEVNULL)

    @classmethod
    def build_deb(cls):
        src = os.path.join(cls.tmp, "onsale")
        os.mkdir(src)
        files = run(["git", "-C", SOURCE, "ls-files", "-z", "--cached", "--others",
                     "--exclude-standard"], capture_output=True).stdout.split(b"\0")
        for rel in filter(None, (f.decode() for f in files)):
            if os.path.isfile(os.path.join(SOURCE, rel)):
                os.makedirs(os.path.dirname(os.path.join(src, rel)), exist_ok=True)
                shutil.copy2(os.path.join(SOURCE, rel), os.path.join(src, rel))
        commit = run(["git", "-C", SOURCE, "rev-parse", "--short=12", "HEAD"],
                     capture_output=True, text=True).stdout.strip()
        log = os.path.join(cls.tmp, "dpkg-buildpackage.log")
        with open(log, "wb") as f:
            p = run(["dpkg-buildpackage", "-b", "-us", "-uc", "-j2"], cwd=src, stdout=f,
                    stderr=subprocess.STDOUT, check=False,
                    env=dict(os.environ, ONSALE_COMMIT=commit, DEB_BUILD_OPTIONS="nocheck"))
        if p.returncode != 0:
            with open(log, errors="replace") as f:
                raise AssertionError("dpkg-buildpackage failed:\n" + f.read()[-4000:])
        debs = glob.glob(os.path.join(cls.tmp, "onsale_*.deb"))
        assert len(debs) == 1, debs
        cls.commit = commit
        return debs[0]

    @classmethod
    def teardown_all(cls):
        for p in cls.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in cls.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        if cls.infra_env:
            run([os.path.join(SOURCE, "deploy", "onsale"), "down"], env=cls.infra_env,
                check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        run(["dpkg", "--purge", "onsale"], check=False, stdout=subprocess.DEVNULL)
        for d in ("secrets", "tls"):
            shutil.rmtree(os.path.join(ETC, d), ignore_errors=True)
        if os.path.exists(f"{ETC}/admission-pub.pem"):
            os.unlink(f"{ETC}/admission-pub.pem")
        shutil.rmtree("/var/lib/onsale-paysim", ignore_errors=True)
        if os.path.isdir(ETC) and not os.listdir(ETC):
            os.rmdir(ETC)
        if os.environ.get("ONSALE_IT_KEEP_STATE") != "1":
            shutil.rmtree(cls.tmp, ignore_errors=True)
        fcntl.flock(cls.lock, fcntl.LOCK_UN)
        cls.lock.close()

    # -- the installed files

    def test_1_installed_layout(self):
        for path in ("/usr/bin/onsale-gateway", "/usr/bin/onsale-reserve",
                     "/usr/bin/onsale-paysim", "/usr/bin/onsale-token"):
            self.assertTrue(os.access(path, os.X_OK), path)
            out = run([path, "--version"], capture_output=True, text=True).stdout
            self.assertEqual(out, f"{os.path.basename(path)} 0.1.0 (commit {self.commit})\n")
        for path in (f"{ETC}/gateway-1.conf", f"{ETC}/reserve-1.conf", f"{ETC}/paysim.conf",
                     f"{UNITS}/onsale-gateway@.service", f"{UNITS}/onsale-reserve@.service",
                     "/usr/share/onsale/sql/001_reserve.sql", "/usr/share/onsale/onsale-alerts.yml",
                     "/usr/share/doc/onsale/copyright",
                     # uncompressed: the alert rules' runbook_url opens it
                     "/usr/share/doc/onsale/operations.md"):
            self.assertTrue(os.path.isfile(path), path)
        self.assertEqual(pwd.getpwnam("onsale").pw_shell, "/usr/sbin/nologin")
        st = os.stat(f"{ETC}/secrets")
        self.assertEqual((st.st_uid, st.st_mode & 0o777), (0, 0o700))
        conffiles = run(["dpkg-query", "-W", "-f=${Conffiles}", "onsale"],
                        capture_output=True, text=True).stdout
        self.assertIn(f"{ETC}/gateway-1.conf", conffiles)

    # -- running it

    def start_infra(self):
        state = os.path.join(self.tmp, "state")
        os.mkdir(state, 0o755)
        ports = stack._free_ports(4)
        self.redis_port, self.pg_port = ports[0], ports[1]
        env = dict(os.environ, ONSALE_STATE=state, ONSALE_INFRA_ONLY="1", ONSALE_SKIP_DEPS="1",
                   ONSALE_SKIP_BUILD="1", ONSALE_REDIS_PORT=str(ports[0]),
                   ONSALE_PG_PORT=str(ports[1]), ONSALE_RESERVE_PORT=str(ports[2]),
                   ONSALE_GATEWAY_PORT=str(ports[3]), ONSALE_BUILD=os.path.join(self.tmp, "none"))
        type(self).infra_env = env
        with open(os.path.join(self.tmp, "infra.log"), "wb") as f:
            run([os.path.join(SOURCE, "deploy", "onsale"), "up"], env=env, stdout=f,
                stderr=subprocess.STDOUT, timeout=180)
        return state

    def configure(self, state):
        """What docs/operations.md "Installing" tells an operator to do."""
        sec, tls = f"{ETC}/secrets", f"{ETC}/tls"
        for name, src in (("admission-1.pem", "keys/admission-1.pem"),
                          ("gateway-admin-token", "gateway-admin-token"),
                          ("reserve-admin-token", "admin-token"),
                          ("redis-gateway-password", "redis-gateway-password"),
                          ("redis-reserve-password", "redis-reserve-password"),
                          ("pg-password", "pg-password")):
            install_file(os.path.join(state, src), os.path.join(sec, name), 0o600)
        with open(os.path.join(sec, "ticket-secret-1"), "w") as f:
            f.write(uuid.uuid4().hex + uuid.uuid4().hex + "\n")
        os.chmod(os.path.join(sec, "ticket-secret-1"), 0o600)
        for name, mode in (("server.pem", 0o644), ("server-key.pem", 0o600), ("ca.pem", 0o644)):
            install_file(os.path.join(state, name), os.path.join(tls, name), mode, "onsale")
        install_file(os.path.join(state, "keys", "admission-pub.pem"),
                     f"{ETC}/admission-pub.pem", 0o644)
        os.makedirs("/var/lib/onsale-paysim", exist_ok=True)  # the unit's StateDirectory=
        pw = pwd.getpwnam("onsale")
        os.chown("/var/lib/onsale-paysim", pw.pw_uid, pw.pw_gid)
        self.gw_port, self.rsv_port, self.ps_port, gw_admin, rsv_admin = stack._free_ports(5)
        self.gw_admin, self.rsv_admin = gw_admin, rsv_admin
        common = {"tls_cert": f"{tls}/server.pem", "tls_key": f"{tls}/server-key.pem",
                  "redis_host": "127.0.0.1", "redis_port": self.redis_port,
                  "redis_password_file": "credential:redis-password",
                  "admin_token_file": "credential:admin-token", "workers": 2}
        set_keys(f"{ETC}/paysim.conf", {"port": self.ps_port, "tls_cert": f"{tls}/server.pem",
                                        "tls_key": f"{tls}/server-key.pem",
                                        "ledger_file": "/var/lib/onsale-paysim/ledger"})
        set_keys(f"{ETC}/reserve-1.conf", dict(
            common, port=self.rsv_port, admin_listen=f"127.0.0.1:{rsv_admin}",
            redis_user="onsale-reserve",
            pg_conninfo=f'"host=127.0.0.1 port={self.pg_port} dbname=onsale user=onsale"',
            pg_password_file="credential:pg-password", admission_keys=f"{ETC}/admission-pub.pem",
            paysim_url=f"https://127.0.0.1:{self.ps_port}", paysim_ca=f"{tls}/ca.pem"))
        set_keys(f"{ETC}/gateway-1.conf", dict(
            common, port=self.gw_port, admin_listen=f"127.0.0.1:{gw_admin}",
            redis_user="onsale-gateway",
            signing_keys="credential:admission-1.pem",
            ticket_secret_file="credential:ticket-secret-1",
            reserve_url=f"https://127.0.0.1:{self.rsv_port}"))
        self.ctx = ssl.create_default_context(cafile=os.path.join(state, "ca.pem"))
        with open(os.path.join(state, "admin-token")) as f:
            self.rsv_token = f.read().strip()
        with open(os.path.join(state, "gateway-admin-token")) as f:
            self.gw_token = f.read().strip()

    def start_unit(self, unit, instance="1"):
        """Runs the unit's ExecStart= as its User=, with its credentials and a
        NOTIFY_SOCKET of our own; returns once it said READY=1 (Type=notify) or, for a
        Type=simple unit, once it is running."""
        (execstart,) = unit_lines(unit, "ExecStart")
        argv = execstart.replace("%i", instance).split()
        (user,) = unit_lines(unit, "User")
        pw = pwd.getpwnam(user)
        name = unit.replace("@", f"@{instance}")
        creds = os.path.join(self.tmp, "credentials", name)
        os.makedirs(creds)
        for spec in unit_lines(unit, "LoadCredential"):
            cred, src = spec.split(":", 1)
            install_file(src, os.path.join(creds, cred), 0o400, user)
        os.chown(creds, pw.pw_uid, pw.pw_gid)
        os.chmod(creds, 0o500)
        os.chmod(os.path.dirname(creds), 0o755)
        sock_path = os.path.join(self.tmp, f"notify-{name}.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(sock_path)
        os.chown(sock_path, pw.pw_uid, pw.pw_gid)
        self.addCleanup(sock.close)
        env = {"PATH": "/usr/bin:/bin", "CREDENTIALS_DIRECTORY": creds,
               "NOTIFY_SOCKET": sock_path, "LANG": "C.UTF-8"}
        log = open(os.path.join(self.tmp, f"{name}.log"), "wb")
        self.addCleanup(log.close)
        p = subprocess.Popen(["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}",
                              "--init-groups", "--"] + argv, env=env, cwd="/", stdout=log,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.procs.append(p)
        if unit_lines(unit, "Type") == ["notify"]:
            sock.settimeout(60)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    msg = sock.recv(4096).decode()
                except socket.timeout:
                    break
                if "READY=1" in msg.split("\n"):
                    return p
            self.fail(f"{name} said no READY=1 within 60 s; log {log.name}")
        return p

    def test_2_journey_through_the_installed_units(self):
        state = self.start_infra()
        self.configure(state)
        self.start_unit("onsale-paysim.service")
        stack.wait_for(lambda: self.get(self.ps_port, "/healthz") == 200, 30,
                       what="paysim /healthz")
        self.start_unit("onsale-reserve@.service")
        self.start_unit("onsale-gateway@.service")
        for port in (self.rsv_port, self.gw_port):
            self.assertEqual(self.get(port, "/readyz"), 200)
        metrics = self.client(self.rsv_admin).get("/metrics").body.decode()
        self.assertIn(f'onsale_build_info{{version="0.1.0",commit="{self.commit}"}} 1', metrics)
        ev = f"pkg-{uuid.uuid4().hex[:12]}"
        seats = [{"id": "A-1", "section": "A", "price": 5000}]
        r = self.client(self.rsv_admin).request(
            "PUT", f"/admin/events/{ev}", body={"seats": seats, "currency": "EUR"},
            token=self.rsv_token)
        self.assertIn(r.status, (200, 201), repr(r))
        # A room as an operator makes it: proof of work and key-bound tickets on, as the
        # installed gateway's defaults say; the fan joins as docs/api.md tells API clients.
        r = self.client(self.gw_admin).request(
            "PUT", f"/admin/events/{ev}",
            body={"rate_per_minute": 600, "mode": "fifo", "admission_ttl_seconds": 600},
            token=self.gw_token)
        self.assertEqual(r.status, 201, repr(r))
        self.assertTrue(r.json.get("pow") and r.json.get("dpop"), repr(r))
        gw = self.client(self.gw_port)
        key, base = DPoPKey(), f"https://127.0.0.1:{self.gw_port}/q/{ev}"
        ch = gw.get(f"/q/{ev}/challenge").json
        j = gw.post(f"/q/{ev}/join", headers={
            "DPoP": key.proof("POST", f"{base}/join"),
            "Onsale-Pow": f"{ch['challenge']}.{stack.pow_example.solve(ch['challenge'], ch['difficulty'])}"})
        self.assertEqual(j.status, 201, repr(j))

        def admitted():
            s = gw.get(f"/q/{ev}/status", token=j.json["ticket"],
                       headers={"DPoP": key.proof("GET", f"{base}/status")})
            return s if s.status == 200 and s.json.get("state") == "admitted" else None
        tok = stack.wait_for(admitted, 30, interval=0.2, what="admission").json["admission_token"]
        # the token is bound to the fan's key (cnf.jkt): every reserve call carries a proof
        # by that key for that very request (docs/api.md, "DPoP on the reserve")
        rsv, origin = self.client(self.rsv_port), f"https://127.0.0.1:{self.rsv_port}"
        path = f"/v1/events/{ev}/holds"
        h = rsv.post(path, {"seats": ["A-1"]}, token=tok,
                     headers={"DPoP": key.proof("POST", origin + path)})
        self.assertEqual(h.status, 201, repr(h))
        path = f"/v1/holds/{h.json['hold_id']}/confirm"
        c = rsv.post(path, {"payment": {"amount": h.json["amount"], "currency": "EUR",
                                        "source": "tok_visa"}},
                     token=tok, headers={"Idempotency-Key": uuid.uuid4().hex,
                                         "DPoP": key.proof("POST", origin + path)})
        self.assertEqual(c.status, 201, repr(c))
        self.assertEqual(c.json.get("state"), "confirmed", repr(c))
        print(f"\npackage journey: {os.path.basename(self.deb)} join → admitted → hold → "
              f"confirm ({c.json['booking_id']})", file=sys.stderr)

    def client(self, port):
        c = stack.Client(port, self.ctx, timeout=10)
        self.addCleanup(c.close)
        return c

    def get(self, port, path):
        c = stack.Client(port, self.ctx, timeout=5)
        try:
            return c.get(path).status
        except (OSError, ssl.SSLError):
            return None
        finally:
            c.close()


if __name__ == "__main__":
    unittest.main()
