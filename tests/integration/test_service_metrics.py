"""The series the production alerts read (deploy/prometheus/onsale-alerts.yml), on the
real services: which build answers (onsale_build_info), when the served certificate
expires, each room's phase on the gateway (OnsaleAdmissionStalled pages only in
"open"), and the age of the oldest checkout still mid-saga on the reserve
(OnsaleStuckCheckouts). Also what an SRE's scrape expects of both services: `promtool
check metrics` clean, a code label on the request histograms, the process_* series; and
the request id (X-Request-Id) and access-log line of every answer."""

import datetime
import os
import re
import shutil
import subprocess
import time
import unittest
import uuid

import stack
from stack import metric_sum, parse_metrics

S = None


def setUpModule():
    global S
    S = stack.module_stack("metrics")


def gateway_metrics_text():
    c = stack.Client(S.gateway_admin_port, S.ctx)
    try:
        r = c.get("/metrics", token=S.gateway_admin_token)
    finally:
        c.close()
    assert r.status == 200, repr(r)
    return r.body.decode()


def reserve_metrics_text():
    c = stack.Client(S.instance_reserve_port + stack.ADMIN_OFFSET, S.ctx)
    try:
        r = c.get("/metrics")
    finally:
        c.close()
    assert r.status == 200, repr(r)
    return r.body.decode()


def gateway_metrics():
    return parse_metrics(gateway_metrics_text())


def iso(ms_from_now):
    t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(milliseconds=ms_from_now)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


class BuildAndCertificate(unittest.TestCase):
    def test_build_info_on_both_services(self):
        out = subprocess.run([S.reserve_bin, "--version"], capture_output=True, text=True,
                             timeout=10).stdout.split()
        version, commit = out[1], out[3].rstrip(")")
        for name, m in (("reserve", S.metrics()), ("gateway", gateway_metrics())):
            series = m.get("onsale_build_info", [])
            self.assertEqual(series, [({"version": version, "commit": commit}, 1.0)],
                             f"{name}: {series}")

    def test_every_binary_answers_version(self):
        with open(os.path.join(S.source, "CMakeLists.txt")) as f:
            want = next(ln.split("VERSION")[1].split()[0] for ln in f
                        if ln.startswith("project(onsale VERSION"))
        for rel in ("gateway/onsale-gateway", "reserve/onsale-reserve",
                    "loadgen/paysim/onsale-paysim", "loadgen/onsale-token",
                    "loadgen/sim/onsale-sim", "loadgen/onsale-bench-crypto"):
            p = subprocess.run([os.path.join(S.build, rel), "--version"], capture_output=True,
                               text=True, timeout=10)
            name = os.path.basename(rel)
            self.assertEqual(p.returncode, 0, f"{name}: {p.stderr}")
            self.assertRegex(p.stdout, rf"^{name} {re.escape(want)} \(commit ([0-9a-f]+|unknown)\)\n$")

    def test_certificate_expiry_is_the_served_certificate(self):
        p = subprocess.run(["openssl", "x509", "-noout", "-enddate", "-in",
                            os.path.join(S.state, "server.pem")],
                           capture_output=True, text=True, check=True)
        end = datetime.datetime.strptime(p.stdout.strip().split("=", 1)[1],
                                         "%b %d %H:%M:%S %Y %Z")
        want = end.replace(tzinfo=datetime.timezone.utc).timestamp()
        self.assertEqual(metric_sum(S.metrics(), "onsale_reserve_tls_cert_expiry_timestamp_seconds"),
                         want)
        self.assertEqual(metric_sum(gateway_metrics(),
                                    "onsale_gateway_tls_cert_expiry_timestamp_seconds"), want)


class RoomPhase(unittest.TestCase):
    def phase_is(self, ev, phase):
        def check():
            m = gateway_metrics()
            ones = [lab["phase"] for lab, v in m.get("onsale_gateway_room_phase", [])
                    if lab.get("event") == ev and v == 1]
            return ones == [phase]
        stack.wait_for(check, 10, interval=0.2, what=f"{ev} in phase {phase} (one-hot)")

    def room(self, **settings):
        ev = stack.new_id("ph")
        r = S.gateway_admin("PUT", f"/admin/events/{ev}", dict(rate_per_minute=600, **settings))
        self.assertEqual(r.status, 201, repr(r))
        return ev

    def patch(self, ev, **settings):
        r = S.gateway_admin("PATCH", f"/admin/events/{ev}", settings)
        self.assertEqual(r.status, 200, repr(r))

    def test_a_night_of_phases(self):
        ev = self.room(prequeue_at=iso(-1000), opens_at=iso(3_600_000))
        self.phase_is(ev, "prequeue")
        self.patch(ev, opens_at=iso(-500))
        self.phase_is(ev, "open")
        self.patch(ev, paused=True)
        self.phase_is(ev, "paused")
        self.patch(ev, paused=False, sold_out=True)
        self.phase_is(ev, "sold_out")

    def test_scheduled_and_full(self):
        ev = self.room(prequeue_at=iso(3_000_000), opens_at=iso(3_600_000))
        self.phase_is(ev, "scheduled")
        ev = self.room(max_active=1)
        c = stack.Client(S.gateway_port, S.ctx)
        self.addCleanup(c.close)
        t = c.post(f"/q/{ev}/join").json["ticket"]

        def admitted():
            r = c.get(f"/q/{ev}/status", token=t)
            return r.status == 200 and r.json.get("state") == "admitted"
        stack.wait_for(admitted, 20, interval=0.2, what="admission")
        self.phase_is(ev, "full")  # one shopper in, max_active 1: nobody else passes


class OldestCheckout(unittest.TestCase):
    def test_age_of_the_oldest_checkout_mid_saga(self):
        ev = stack.new_id("old")
        S.create_event(ev, seats=[{"id": "A-1", "section": "A", "price": 100}])
        cid = f"co_{uuid.uuid4().hex}"
        # a checkout an hour old that is still waiting for the provider, freshly touched
        # (so the reconciler leaves it alone for reconcile_after_s)
        S.sql("INSERT INTO checkouts (checkout_id, event_id, buyer, idem_key, request_hash, "
              "hold_id, state, amount, currency, created_at, updated_at) VALUES "
              f"('{cid}', '{ev}', 'old-buyer', '{cid}', 'x', 'h_{cid}', 'payment_requested', "
              "100, 'EUR', now() - interval '1 hour', now())")

        def old_enough():
            v = metric_sum(S.metrics(), "onsale_reserve_oldest_open_checkout_seconds")
            return v if v >= 3600 else None
        age = stack.wait_for(old_enough, 20, interval=0.25, what="oldest open checkout >= 1 h")
        self.assertLess(age, 3600 + 120)
        S.sql(f"UPDATE checkouts SET state = 'failed' WHERE checkout_id = '{cid}'")

        def gone():
            v = metric_sum(S.metrics(), "onsale_reserve_oldest_open_checkout_seconds")
            return v < 3600 or None
        stack.wait_for(gone, 20, interval=0.25, what="a terminal checkout no longer counted")


class Scrape(unittest.TestCase):
    """Both services' /metrics as Prometheus's own linter reads them."""

    def scrapes(self):
        return (("gateway", gateway_metrics_text), ("reserve", reserve_metrics_text))

    def test_promtool_check_metrics_is_clean(self):
        if shutil.which("promtool") is None:
            self.skipTest("promtool not installed (Debian package prometheus; CI installs it)")
        for name, scrape in self.scrapes():
            p = subprocess.run(["promtool", "check", "metrics"], input=scrape(),
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(p.returncode, 0, f"{name}: {p.stdout}{p.stderr}")

    def test_request_histograms_carry_the_status_code(self):
        c = stack.Client(S.reserve_port, S.ctx)
        self.addCleanup(c.close)
        self.assertEqual(c.get("/v1/events/no-such-event/availability").status, 404)
        m = S.metrics()
        codes = {(lab.get("endpoint"), lab.get("code"))
                 for lab, _ in m.get("onsale_reserve_request_seconds_count", [])}
        self.assertIn(("availability", "404"), codes)
        self.assertTrue(all(code for _, code in codes), codes)
        g = stack.Client(S.gateway_port, S.ctx)
        self.addCleanup(g.close)
        self.assertEqual(g.get("/healthz").status, 200)
        codes = {(lab.get("endpoint"), lab.get("code"))
                 for lab, _ in gateway_metrics().get("onsale_gateway_request_seconds_count", [])}
        self.assertIn(("healthz", "200"), codes)

    def test_process_metrics_are_present_and_move(self):
        names = ("process_cpu_seconds_total", "process_resident_memory_bytes",
                 "process_virtual_memory_bytes", "process_open_fds", "process_max_fds",
                 "process_start_time_seconds")
        for name, scrape in self.scrapes():
            m = parse_metrics(scrape())
            for n in names:
                self.assertIn(n, m, f"{name}: {n}")
                self.assertGreater(metric_sum(m, n), 0, f"{name}: {n}")
            start = metric_sum(m, "process_start_time_seconds")
            self.assertLess(abs(start - time.time()), 3600, f"{name}: started {start}")
            self.assertGreaterEqual(metric_sum(m, "process_max_fds"),
                                    metric_sum(m, "process_open_fds"))
            cpu0 = metric_sum(m, "process_cpu_seconds_total")

            def cpu_moved(scrape=scrape):
                for _ in range(20):  # each scrape renders the whole registry: CPU
                    scrape()
                return metric_sum(parse_metrics(scrape()), "process_cpu_seconds_total") > cpu0
            stack.wait_for(cpu_moved, 20, interval=0, what=f"{name}: CPU seconds move")

    def test_up_gauges_are_zero_or_one(self):
        for name, scrape in self.scrapes():
            m = parse_metrics(scrape())
            ups = [n for n in m if n.endswith("_up")]
            self.assertTrue(ups, name)
            for n in ups:
                for lab, v in m[n]:
                    self.assertIn(v, (0.0, 1.0), f"{name}: {n}{lab} = {v}")


RID = re.compile(r"^[0-9a-f]{16}$")


def log_path(name):
    return os.path.join(S.state, "log", f"{name}.log")


def log_lines_with(name, needle):
    with open(log_path(name), "rb") as f:
        return [ln for ln in f.read().decode("utf-8", "replace").splitlines() if needle in ln]


class RequestIds(unittest.TestCase):
    """X-Request-Id on every answer of both services: a sane incoming one kept, an insane
    one replaced, a traceparent's trace id used, else a fresh one."""

    def clients(self):
        r = stack.Client(S.reserve_port, S.ctx)
        g = stack.Client(S.gateway_port, S.ctx)
        self.addCleanup(r.close)
        self.addCleanup(g.close)
        return (("reserve", r), ("gateway", g))

    def test_sane_incoming_id_is_echoed(self):
        for name, c in self.clients():
            rid = f"it-{uuid.uuid4().hex}.x_y"
            r = c.get("/healthz", headers={"X-Request-Id": rid})
            self.assertEqual(r.header("X-Request-Id"), rid, f"{name}: {r!r}")

    def test_insane_ids_are_replaced(self):
        for name, c in self.clients():
            for bad in ("a" * 65, "has space", "semi;colon", "\u00e9t\u00e9".encode().decode("latin-1"), ""):
                r = c.get("/healthz", headers={"X-Request-Id": bad})
                got = r.header("X-Request-Id")
                self.assertRegex(got or "", RID, f"{name}: {bad!r} -> {got!r}")

    def test_traceparent_trace_id_is_used(self):
        trace = uuid.uuid4().hex
        tp = f"00-{trace}-00f067aa0ba902b7-01"
        for name, c in self.clients():
            r = c.get("/healthz", headers={"traceparent": tp})
            self.assertEqual(r.header("X-Request-Id"), trace, f"{name}: {r!r}")
            r = c.get("/healthz", headers={"traceparent": f"00-{'0' * 32}-00f067aa0ba902b7-01"})
            self.assertRegex(r.header("X-Request-Id") or "", RID, f"{name}: all-zero trace id")

    def test_fresh_ids_differ_and_errors_carry_one(self):
        for name, c in self.clients():
            a = c.get("/healthz").header("X-Request-Id")
            b = c.get("/no/such/route").header("X-Request-Id")
            self.assertRegex(a or "", RID, name)
            self.assertRegex(b or "", RID, name)
            self.assertNotEqual(a, b, name)


class AccessLog(unittest.TestCase):
    def test_one_line_per_request_with_route_status_and_no_token(self):
        ev = stack.new_id("acc")
        token = S.token(ev, "acc-buyer")
        signature = token.split(".")[2]
        rid = f"acc-{uuid.uuid4().hex}"
        c = stack.Client(S.reserve_port, S.ctx)
        self.addCleanup(c.close)
        r = c.get(f"/v1/events/{ev}/availability?token={token}", token=token,
                  headers={"X-Request-Id": rid, "Cookie": f"session={token}"})
        self.assertEqual(r.status, 404, repr(r))

        def line():
            found = [ln for n in S.reserve_names for ln in log_lines_with(n, rid)]
            return [ln for ln in found if "access method=" in ln] or None
        lines = stack.wait_for(line, 10, what="the access line of the request")
        self.assertEqual(len(lines), 1, lines)
        ln = lines[0]
        self.assertRegex(ln, r"\bmethod=GET route=availability status=404 us=\d+ bytes=\d+ "
                             r"peer=127\.0\.0\.1\b")
        self.assertNotIn(ev, ln)  # the route's name, not the path
        for part in (token, signature, "token=", "session="):
            self.assertNotIn(part, ln)


if __name__ == "__main__":
    unittest.main()
