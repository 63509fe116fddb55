"""The Grafana dashboard (deploy/grafana/onsale.json) against a real Prometheus.

A private stack serves a small on-sale — fans join a room and are admitted, buyers hold
and confirm, one buyer loses a seat to another, a forged token and an unknown event get
their 4xx — while Prometheus (Debian's, on a free loopback port) scrapes both services'
admin /metrics over TLS with their bearer tokens, every second. Then every query of every
panel is run through Prometheus' HTTP API, the dashboard's variables replaced as Grafana
would ($event: all rooms, $__rate_interval: four scrape intervals), and must return data:
a panel that names a metric or a label the services do not export is caught here, not on
the night. The JSON's own shape is checked too: unique panel ids, every panel on the
dashboard's datasource variable, a description on each."""

import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest
import urllib.parse
import urllib.request
import uuid

import stack

S = None
PROM = None
DASHBOARD = None
SCRAPE_S = 1


class Prometheus:
    """prometheus --config.file=… on a free port; stopped (and its data removed) at the end."""

    def __init__(self, S):
        self.dir = tempfile.mkdtemp(prefix="onsale-it-prom-")
        self.port = stack._free_ports(1)[0]
        jobs = []
        for job, port, token in (("onsale-gateway", S.gateway_admin_port, S.gateway_admin_token),
                                 ("onsale-reserve", S.reserve_admin_port, S.admin_token)):
            tok = os.path.join(self.dir, f"{job}.token")
            with open(tok, "w") as f:
                f.write(token)
            jobs.append(f"""  - job_name: {job}
    scheme: https
    tls_config: {{ca_file: {S.ca}}}
    authorization: {{credentials_file: {tok}}}
    static_configs: [{{targets: ["{stack.HOST}:{port}"]}}]
""")
        conf = os.path.join(self.dir, "prometheus.yml")
        with open(conf, "w") as f:
            f.write(f"global: {{scrape_interval: {SCRAPE_S}s, evaluation_interval: {SCRAPE_S}s}}\n"
                    "scrape_configs:\n" + "".join(jobs))
        self.log = open(os.path.join(self.dir, "prometheus.log"), "wb")
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={conf}", f"--storage.tsdb.path={self.dir}/data",
             f"--web.listen-address={stack.HOST}:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def api(self, path, **params):
        url = f"http://{stack.HOST}:{self.port}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as r:
            doc = json.load(r)
        if doc.get("status") != "success":
            raise AssertionError(f"{path} {params}: {doc}")
        return doc["data"]

    def targets_up(self):
        try:
            active = self.api("targets")["activeTargets"]
        except OSError:
            return False
        return len(active) == 2 and all(t["health"] == "up" for t in active)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def a_small_onsale():
    """Traffic that moves every series the dashboard reads."""
    ev = stack.new_id("dash")
    r = S.gateway_admin("PUT", f"/admin/events/{ev}", {"rate_per_minute": 6000})
    assert r.status == 201, repr(r)
    c = stack.Client(S.gateway_port, S.ctx)
    try:
        tickets = [c.post(f"/q/{ev}/join").json["ticket"] for _ in range(3)]
        for t in tickets:
            def admitted(t=t):
                r = c.get(f"/q/{ev}/status", token=t)
                return r.status == 200 and r.json.get("state") == "admitted"
            stack.wait_for(admitted, 30, interval=0.2, what="admission")
        assert 400 <= c.get("/q/no-such-room/status").status < 500
    finally:
        c.close()
    shop = stack.new_id("dash")
    r = S.create_event(shop, seats=[{"id": f"A-{i}", "section": "A", "price": 1500}
                                    for i in range(1, 4)])
    assert r.status == 201, repr(r)
    c = S.client()
    try:
        for i in range(1, 3):
            token = S.token(shop, f"buyer-{i}")
            h = c.post(f"/v1/events/{shop}/holds", {"seats": [f"A-{i}"]}, token=token)
            assert h.status == 201, repr(h)
            body = {"payment": {"amount": 1500, "currency": "EUR", "source": "tok_visa"}}
            r = c.post(f"/v1/holds/{h.json['hold_id']}/confirm", body, token=token,
                       headers={"Idempotency-Key": uuid.uuid4().hex})
            assert r.status == 201, repr(r)
        lost = c.post(f"/v1/events/{shop}/holds", {"seats": ["A-1"]},
                      token=S.token(shop, "buyer-late"))
        assert lost.status == 409, repr(lost)
        assert c.post(f"/v1/events/{shop}/holds", {"seats": ["A-3"]},
                      token="not.a.token").status == 401
    finally:
        c.close()


def setUpModule():
    global S, PROM, DASHBOARD
    if shutil.which("prometheus") is None:
        raise unittest.SkipTest("prometheus is not installed (deploy/onsale test installs it)")
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "deploy", "grafana",
                           "onsale.json")) as f:
        DASHBOARD = json.load(f)
    S = stack.module_stack("dashboard")
    PROM = Prometheus(S)
    try:
        stack.wait_for(PROM.targets_up, 60, interval=0.5, what="Prometheus scraping both services")
        a_small_onsale()
        # enough scrapes after the traffic for rate() over $__rate_interval to see it
        time.sleep(6 * SCRAPE_S)
    except BaseException:
        PROM.stop()
        raise


def tearDownModule():
    if PROM is not None:
        PROM.stop()


def panels():
    for p in DASHBOARD["panels"]:
        yield p
        yield from p.get("panels", [])


def grafana_expr(expr):
    """What Grafana sends Prometheus: the dashboard's variables replaced."""
    return (expr.replace("$__rate_interval", f"{4 * SCRAPE_S}s")
            .replace('=~"$event"', '=~".*"'))


class Dashboard(unittest.TestCase):
    def test_the_json_is_a_dashboard(self):
        ids = [p["id"] for p in panels()]
        self.assertEqual(len(ids), len(set(ids)), "panel ids repeat")
        names = [v["name"] for v in DASHBOARD["templating"]["list"]]
        self.assertIn("datasource", names)
        graphs = [p for p in panels() if p["type"] != "row"]
        self.assertGreaterEqual(len(graphs), 20)
        for p in graphs:
            self.assertEqual(p["datasource"]["uid"], "${datasource}", p["title"])
            self.assertTrue(p.get("description"), f"{p['title']}: no description")
            self.assertTrue(p["targets"], f"{p['title']}: no query")
            for t in p["targets"]:
                self.assertEqual(t["datasource"]["uid"], "${datasource}", p["title"])

    def test_every_panel_query_returns_data(self):
        empty = []
        for p in panels():
            for t in p.get("targets", []):
                expr = grafana_expr(t["expr"])
                res = PROM.api("query", query=expr)["result"]
                if not res:
                    empty.append(f"{p['title']}: {expr}")
        self.assertEqual(empty, [], "panel queries without data:\n  " + "\n  ".join(empty))

    def test_the_event_variable_lists_the_rooms(self):
        var = next(v for v in DASHBOARD["templating"]["list"] if v["name"] == "event")
        metric = var["definition"].split("(", 1)[1].split(",")[0].strip()
        rooms = PROM.api("label/event/values", **{"match[]": metric})
        self.assertTrue(any(r.startswith("dash") for r in rooms), rooms)


if __name__ == "__main__":
    unittest.main()
