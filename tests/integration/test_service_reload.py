"""Reload like pgbouncer (docs/operations.md, "Reload"): SIGHUP re-reads each service's
whole configuration file. A live key (the operators' token, the log level, the
reserve's CORS origins) takes effect without a restart; a restart-only key is logged as
a warning naming it and keeps its running value; a file that does not load leaves the
old configuration in force while the service keeps answering. `--check-config`
validates a file and the files it names, and exits 0 or 1 without touching Redis or
Postgres. GET /admin/config shows the effective configuration to operators only, with
every secret masked.

Each test starts its own process of the service (two workers) from a copy of the
stack's configuration file, against the stack's Redis and Postgres."""

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import unittest

import stack

BOUND = 20  # seconds any one expected effect of a SIGHUP may take

S = None


def setUpModule():
    global S
    S = stack.module_stack("reload")


class ReloadCase(unittest.TestCase):
    service = None  # "reserve" | "gateway"

    def setUp(self):
        self.S = S
        if self.S.cluster:
            self.skipTest("one process against one stack; the topology does not matter")
        self.bin = os.path.join(self.S.build, self.service, f"onsale-{self.service}")
        self.dir = tempfile.mkdtemp(prefix=f"onsale-reload-{self.service}-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        with open(os.path.join(self.S.state, f"{self.service}.conf")) as f:
            self.base_conf = f.read()
        self.conf = os.path.join(self.dir, f"{self.service}.conf")
        self.token_file = os.path.join(self.dir, "admin-token")
        self.token = "first-operator-token-" + os.urandom(8).hex()
        self.write_secret(self.token_file, self.token)
        self.port, self.admin = stack._free_ports(2)
        self.log_path = os.path.join(self.dir, "service.log")
        self.proc = None

    def write_secret(self, path, value):
        with open(path + ".new", "w") as f:
            f.write(value + "\n")
        os.chmod(path + ".new", 0o600)
        os.replace(path + ".new", path)

    def write_conf(self, **extra):
        """The stack's file, then this test's admin token file, then extra keys (the last
        line of a key wins)."""
        lines = [self.base_conf, f"admin_token_file = {self.token_file}"]
        lines += [f"{k} = {v}" for k, v in extra.items()]
        with open(self.conf + ".new", "w") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(self.conf + ".new", self.conf)

    def args(self):
        return [self.bin, "--config", self.conf, f"--port={self.port}",
                f"--admin_listen=127.0.0.1:{self.admin}", "--workers=2"]

    def start(self, **extra):
        self.write_conf(**extra)
        log = open(self.log_path, "ab")
        self.addCleanup(log.close)
        env = {k: v for k, v in os.environ.items() if not k.startswith("ONSALE_")}
        self.proc = subprocess.Popen(self.args(), env=env, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)

        def stop():
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(30)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)
        self.addCleanup(stop)
        stack.wait_for(lambda: self.admin_get("/readyz", None).status == 200, BOUND,
                       interval=0.1, what=f"{self.service} /readyz 200")

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def admin_get(self, path, token, headers=None):
        c = stack.Client(self.admin, self.S.ctx, timeout=5)
        try:
            return c.request("GET", path, token=token, headers=headers)
        except OSError as e:
            return stack.Response("GET", path, None, {}, b"", error=e)
        finally:
            c.close()

    def config(self):
        r = self.admin_get("/admin/config", self.token)
        self.assertEqual(r.status, 200, r)
        return r.json["config"]

    def reload(self, **extra):
        """Rewrites the file and sends SIGHUP; returns the log's length before it."""
        mark = len(self.log())
        self.write_conf(**extra)
        self.proc.send_signal(signal.SIGHUP)
        return mark

    def wait_log(self, text, mark):
        stack.wait_for(lambda: text in self.log()[mark:], BOUND, interval=0.05,
                       what=f"log line {text!r}")

    def reload_done(self, mark):
        self.wait_log(f"reload: {self.service} configuration ", mark)

    # -- the tests each service passes

    def test_operator_token_changes_live(self):
        self.start()
        self.assertEqual(self.admin_get("/admin/config", self.token).status, 200)
        new = "second-operator-token-" + os.urandom(8).hex()
        new_file = os.path.join(self.dir, "admin-token-2")
        self.write_secret(new_file, new)
        old = self.token
        self.token_file = new_file
        mark = self.reload()
        self.wait_log("reload: admin_token_file changed (applied live)", mark)
        self.reload_done(mark)
        self.token = new
        self.assertEqual(self.admin_get("/admin/config", new).status, 200)
        self.assertEqual(self.admin_get("/admin/config", old).status, 401)
        self.assertIsNone(self.proc.poll())

    def test_log_level_changes_live(self):
        self.start(log_level="info")
        self.assertEqual(self.config()["log_level"], "info")
        rounds = self.config_reloads()
        self.reload(log_level="error")
        stack.wait_for(lambda: self.config_reloads() > rounds, BOUND, what="a reload round")
        self.assertEqual(self.config()["log_level"], "error")
        # at "error" the info lines of a reload round are no longer written
        rounds = self.config_reloads()
        mark = len(self.log())
        self.proc.send_signal(signal.SIGHUP)
        stack.wait_for(lambda: self.config_reloads() > rounds, BOUND, what="a reload round")
        self.assertNotIn("reloaded", self.log()[mark:])
        mark = self.reload(log_level="info")
        self.reload_done(mark)  # written again
        self.assertEqual(self.config()["log_level"], "info")

    def test_log_format_and_access_log_change_live(self):
        self.start(log_format="text", access_log="true")
        self.admin_get("/admin/config", self.token)
        self.wait_log("access method=GET", 0)  # text access lines while on
        mark = self.reload(log_format="json", access_log="false")
        self.reload_done(mark)
        self.assertEqual(self.config()["log_format"], "json")
        self.assertIs(self.config()["access_log"], False)
        lines = [ln for ln in self.log()[mark:].splitlines() if ln.strip()]
        after = lines[[i for i, ln in enumerate(lines) if "applied live" in ln][-1] + 1:]
        for ln in after:  # every line after the switch is JSON, and no access line comes
            doc = json.loads(ln)
            self.assertNotIn("access method=", doc["message"])
        mark = self.reload(log_format="text", access_log="true")
        self.reload_done(mark)
        self.admin_get("/admin/config", self.token)
        self.wait_log("access method=GET", mark)

    def config_reloads(self):
        r = self.admin_get("/admin/config", self.token)
        self.assertEqual(r.status, 200, r)
        return r.json["reloads"]

    def test_restart_key_warns_and_keeps_running_value(self):
        self.start(max_header_bytes=8192)
        mark = self.reload(max_header_bytes=16384, workers=3)
        self.wait_log("reload: max_header_bytes changed in the configuration but needs a restart",
                      mark)
        self.reload_done(mark)
        log = self.log()[mark:]
        warning = [ln for ln in log.splitlines() if "max_header_bytes changed" in ln]
        self.assertTrue(warning and " warn" in warning[0], warning)
        self.assertEqual(self.config()["max_header_bytes"], 8192)
        # workers came from the command line, which still wins over the file: no change
        self.assertNotIn("reload: workers changed", log)
        self.assertEqual(self.config()["workers"], 2)

    def test_broken_file_keeps_old_configuration(self):
        self.start(log_level="info")
        mark = len(self.log())
        with open(self.conf, "a") as f:
            f.write("no_such_key = 1\nthis line is not key value\n")
        self.proc.send_signal(signal.SIGHUP)
        self.wait_log(f"reload: {self.service} configuration kept as it was", mark)
        self.assertIn("unknown key 'no_such_key'", self.log()[mark:])
        self.assertEqual(self.admin_get("/readyz", None).status, 200)
        self.assertEqual(self.config()["log_level"], "info")
        self.assertIsNone(self.proc.poll(), "a bad file on reload stopped the service")
        # a token file others may read is refused as a whole too: the old token still works
        self.write_conf(log_level="info")
        os.chmod(self.token_file, 0o644)
        mark = len(self.log())
        self.proc.send_signal(signal.SIGHUP)
        self.wait_log(f"reload: {self.service} configuration kept as it was", mark)
        self.assertEqual(self.admin_get("/admin/config", self.token).status, 200)

    def test_check_config(self):
        self.write_conf()
        # a Redis port nothing listens on: --check-config never connects
        (dead,) = stack._free_ports(1)
        env = {k: v for k, v in os.environ.items() if not k.startswith("ONSALE_")}
        ok = subprocess.run(self.args() + ["--check-config", f"--redis_port={dead}"], env=env,
                            capture_output=True, text=True, timeout=30)
        self.assertEqual(ok.returncode, 0, ok.stderr)
        self.assertIn("configuration ok", ok.stdout)
        with open(self.conf, "a") as f:
            f.write("no_such_key = 1\n")
        bad = subprocess.run(self.args() + ["--check-config"], env=env, capture_output=True,
                             text=True, timeout=30)
        self.assertEqual(bad.returncode, 1)
        self.assertIn("configuration invalid", bad.stderr)
        self.assertIn("unknown key 'no_such_key'", bad.stderr)
        # a file the configuration names that cannot be used: refused, with its key
        self.write_conf(admin_token_file=os.path.join(self.dir, "missing"))
        bad = subprocess.run(self.args() + ["--check-config"], env=env, capture_output=True,
                             text=True, timeout=30)
        self.assertEqual(bad.returncode, 1)
        self.assertIn("admin_token_file", bad.stderr)
        self.write_conf(tls_cert=self.conf)  # not a certificate
        bad = subprocess.run(self.args() + ["--check-config"], env=env, capture_output=True,
                             text=True, timeout=30)
        self.assertEqual(bad.returncode, 1, bad.stdout)

    def secrets(self):
        """Secret strings of this process that must never appear on /admin/config."""
        out = [self.token]
        for name in (f"redis-{self.service}-password", "pg-password"):
            path = os.path.join(self.S.state, name)
            if os.path.exists(path):
                with open(path) as f:
                    out.append(f.read().strip())
        return out

    def test_admin_config_needs_token_and_masks_secrets(self):
        self.start(**self.secret_keys())
        self.assertEqual(self.admin_get("/admin/config", None).status, 401)
        self.assertEqual(self.admin_get("/admin/config", "wrong-" + self.token).status, 401)
        r = self.admin_get("/admin/config", self.token)
        self.assertEqual(r.status, 200, r)
        body = r.body.decode()
        doc = json.loads(body)
        self.assertEqual(doc["service"], self.service)
        self.assertEqual(doc["config"]["admin_token_file"], self.token_file)
        self.assertEqual(doc["config"]["port"], self.port)
        for secret in self.secrets() + list(self.secret_keys().values()):
            self.assertNotIn(secret, body)
        self.check_masked(doc["config"])

    def secret_keys(self):
        return {}

    def check_masked(self, config):
        pass


class Reserve(ReloadCase):
    service = "reserve"

    API_KEY = "sk_test_do_not_show_" + "9f8e7d6c5b4a"

    def secret_keys(self):
        return {"paysim_api_key": self.API_KEY}

    def check_masked(self, config):
        self.assertEqual(config["paysim_api_key"], "***")

    def preflight(self, origin):
        c = stack.Client(self.port, self.S.ctx, timeout=5)
        try:
            return c.request("OPTIONS", "/v1/events/x/holds", headers={
                "Origin": origin, "Access-Control-Request-Method": "POST"})
        finally:
            c.close()

    def test_cors_origins_change_live(self):
        shop = "https://shop.example.test"
        self.start(cors_origins="")
        self.assertIsNone(self.preflight(shop).header("Access-Control-Allow-Origin"))
        mark = self.reload(cors_origins=shop)
        self.wait_log("reload: cors_origins changed (applied live)", mark)
        self.reload_done(mark)
        self.assertEqual(self.preflight(shop).header("Access-Control-Allow-Origin"), shop)
        # a bad list is refused as a whole: the running one stays
        mark = self.reload(cors_origins="*")
        self.wait_log("reload: reserve configuration kept as it was", mark)
        self.assertEqual(self.preflight(shop).header("Access-Control-Allow-Origin"), shop)


    def paysim(self, api_key):
        """A payment simulator of this test's own that wants api_key; its URL."""
        port = stack._free_ports(1)[0]
        log = open(os.path.join(self.dir, "paysim.log"), "ab")
        self.addCleanup(log.close)
        p = subprocess.Popen(
            [os.path.join(self.S.build, "loadgen", "paysim", "onsale-paysim"), f"--port={port}",
             f"--tls_cert={self.S.state}/server.pem", f"--tls_key={self.S.state}/server-key.pem",
             f"--api_key={api_key}"], stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, env={k: v for k, v in os.environ.items()
                                           if not k.startswith("ONSALE_")})
        self.addCleanup(lambda: (p.terminate(), p.wait(20)))

        def up():
            try:
                socket.create_connection(("127.0.0.1", port), 0.5).close()
                return True
            except OSError:
                return False
        stack.wait_for(up, BOUND, interval=0.1, what="paysim listening")
        return f"https://127.0.0.1:{port}"

    def buy(self, ev, seat):
        c = stack.Client(self.port, self.S.ctx, timeout=15)
        try:
            token = self.S.token(ev, f"reload-buyer-{seat}")
            h = c.post(f"/v1/events/{ev}/holds", {"seats": [seat]}, token=token)
            self.assertEqual(h.status, 201, h)
            body = {"payment": {"amount": 100, "currency": "EUR", "source": "tok_visa"}}
            return c.post(f"/v1/holds/{h.json['hold_id']}/confirm", body, token=token,
                          headers={"Idempotency-Key": os.urandom(8).hex()})
        finally:
            c.close()

    def test_provider_key_changes_live(self):
        right = "sk_right_" + os.urandom(6).hex()
        url = self.paysim(right)
        self.start(paysim_url=url, paysim_api_key="sk_wrong_" + os.urandom(6).hex())
        ev = stack.new_id("key")
        r = self.S.create_event(ev, seats=[{"id": f"A-{i}", "section": "A", "price": 100}
                                           for i in (1, 2)])
        self.assertEqual(r.status, 201, r)
        self.assertNotEqual(self.buy(ev, "A-1").status, 201, "paid with the wrong key")
        mark = self.reload(paysim_url=url, paysim_api_key=right)
        self.wait_log("reload: paysim_api_key changed (applied live)", mark)
        self.reload_done(mark)
        r = self.buy(ev, "A-2")
        self.assertEqual(r.status, 201, r)

    def test_provider_key_file_reread_on_sighup(self):
        """paysim_api_key_file: the key comes from an owner-only file, the file's new
        contents are applied at the next SIGHUP (same path), a file others may read or a
        key inline beside it is refused and the running key stays."""
        right = "sk_right_" + os.urandom(6).hex()
        url = self.paysim(right)
        key_file = os.path.join(self.dir, "provider-key")
        self.write_secret(key_file, "sk_wrong_" + os.urandom(6).hex())
        self.start(paysim_url=url, paysim_api_key_file=key_file)
        self.assertEqual(self.config()["paysim_api_key_file"], key_file)
        self.assertNotIn(right, self.log())
        ev = stack.new_id("keyfile")
        r = self.S.create_event(ev, seats=[{"id": f"A-{i}", "section": "A", "price": 100}
                                           for i in (1, 2, 3)])
        self.assertEqual(r.status, 201, r)
        self.assertNotEqual(self.buy(ev, "A-1").status, 201, "paid with the wrong key")
        self.write_secret(key_file, right)
        mark = self.reload(paysim_url=url, paysim_api_key_file=key_file)
        self.wait_log("reload: payment provider key replaced", mark)
        self.reload_done(mark)
        self.assertEqual(self.buy(ev, "A-2").status, 201)
        # a key file others may read: refused as a whole, the right key stays in force
        os.chmod(key_file, 0o644)
        mark = self.reload(paysim_url=url, paysim_api_key_file=key_file)
        self.wait_log("reload: reserve configuration kept as it was", mark)
        os.chmod(key_file, 0o600)
        # the key both inline and in a file: refused too
        mark = self.reload(paysim_url=url, paysim_api_key_file=key_file, paysim_api_key="sk_x")
        self.wait_log("paysim_api_key and paysim_api_key_file are both set", mark)
        self.assertEqual(self.buy(ev, "A-3").status, 201)
        self.assertNotIn(right, self.log())


class Gateway(ReloadCase):
    service = "gateway"

    def joins(self, ev, n):
        c = stack.Client(self.port, self.S.ctx, timeout=5)
        try:
            return [c.post(f"/q/{ev}/join").status for _ in range(n)]
        finally:
            c.close()

    def admission_kid(self, ev):
        c = stack.Client(self.port, self.S.ctx, timeout=5)
        try:
            ticket = c.post(f"/q/{ev}/join").json["ticket"]

            def admitted():
                r = c.get(f"/q/{ev}/status", token=ticket)
                return r.json.get("admission_token") if r.status == 200 else None
            token = stack.wait_for(admitted, BOUND, interval=0.1, what="an admission token")
        finally:
            c.close()
        return stack.jwt_parts(token)[0]["kid"]

    def jwks_kids(self):
        c = stack.Client(self.port, self.S.ctx, timeout=5)
        try:
            return [k["kid"] for k in c.get("/.well-known/jwks.json").json["keys"]]
        finally:
            c.close()

    def test_signing_keys_change_live(self):
        old = [ln.split("=", 1)[1].strip() for ln in self.base_conf.splitlines()
               if ln.startswith("signing_keys")][-1]
        self.start()
        ev = stack.new_id("kid")
        r = self.S.gateway_admin("PUT", f"/admin/events/{ev}",
                                 {"rate_per_minute": 6000, "dpop": False, "pow": False})
        self.assertEqual(r.status, 201, r)
        first = self.admission_kid(ev)
        self.assertEqual(self.jwks_kids(), [first])
        new = os.path.join(self.dir, "signing-2.pem")
        subprocess.run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout",
                        "-out", new], check=True, capture_output=True)
        os.chmod(new, 0o600)
        mark = self.reload(signing_keys=f"{old},{new}")
        self.wait_log("reload: signing admissions with kid", mark)
        self.reload_done(mark)
        second = self.admission_kid(ev)
        self.assertNotEqual(second, first, "new admissions are still signed with the old key")
        self.assertEqual(sorted(self.jwks_kids()), sorted([first, second]),
                         "the JWKS does not publish both keys")
        # a key file that is no key: nothing changes
        with open(new, "w") as f:
            f.write("not a key\n")
        mark = self.reload(signing_keys=f"{old},{new}")
        self.wait_log("reload: gateway configuration kept as it was", mark)
        self.assertEqual(self.admission_kid(ev), second)

    def test_join_limits_change_live(self):
        self.start(join_rate_per_ip=1, join_burst_per_ip=2)
        ev = stack.new_id("lim")
        r = self.S.gateway_admin("PUT", f"/admin/events/{ev}",
                                 {"rate_per_minute": 600, "dpop": False, "pow": False})
        self.assertEqual(r.status, 201, r)
        self.assertEqual(self.joins(ev, 3)[2], 429, "the burst of 2 was not the limit")
        mark = self.reload(join_rate_per_ip=60000, join_burst_per_ip=50)
        self.wait_log("reload: join_burst_per_ip changed (applied live)", mark)
        self.reload_done(mark)
        # the address keeps its empty bucket; at the new rate it refills to the new burst
        # within 50 ms (at the old one, one join a minute, never)
        stack.wait_for(lambda: 429 not in self.joins(ev, 20), BOUND, interval=0.2,
                       what="20 joins in a row at the new rate and burst")


del ReloadCase

if __name__ == "__main__":
    unittest.main()
