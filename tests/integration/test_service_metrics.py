"""The series the production alerts read (deploy/prometheus/onsale-alerts.yml), on the
real services: which build answers (onsale_build_info), when the served certificate
expires, each room's phase on the gateway (OnsaleAdmissionStalled pages only in
"open"), and the age of the oldest checkout still mid-saga on the reserve
(OnsaleStuckCheckouts)."""

import datetime
import os
import re
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


def gateway_metrics():
    c = stack.Client(S.gateway_admin_port, S.ctx)
    try:
        r = c.get("/metrics", token=S.gateway_admin_token)
    finally:
        c.close()
    assert r.status == 200, repr(r)
    return parse_metrics(r.body.decode())


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


if __name__ == "__main__":
    unittest.main()
