"""The on-sale simulator: scaled-down nights against a private stack.

One stack per module (stack.py: deploy/onsale up with the gateway, reserve, payment
simulator, Redis and Postgres, own ONSALE_STATE and ports). Each test runs
build/loadgen/sim/onsale-sim on a scenario of loadgen/scenarios/ with the variables of
`deploy/onsale env` (exactly what `deploy/onsale sim` does) and checks its exit status
and report.json. The faults night gets a second gateway started here against the same
Redis (its pid goes to the scenario's kill action through ONSALE_SIM_GATEWAY2_PID).
The report is opened in headless Chromium and a screenshot kept next to it.

ONSALE_SIM_SCALE (default 1; 0.25 under ASan, set by tests/CMakeLists.txt) scales every
scenario's fans down further. ONSALE_SIM_ETA_SCALE (default: ONSALE_SIM_SCALE) scales the
ETA night's instead, so the cluster pass can halve the other nights and keep this one
whole: its verdict is about the fans still queued when the operator changes the rate at
8 s, and with the crowd arriving at a fixed 100 a second half the crowd leaves about 40
fans to judge instead of about 400.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import unittest

import stack

SIM_TIMEOUT = 400
SCALE = os.environ.get("ONSALE_SIM_SCALE", "1")
ETA_SCALE = os.environ.get("ONSALE_SIM_ETA_SCALE", SCALE)
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
S = None


def setUpModule():
    global S
    S = stack.module_stack("sim")


class SimTest(unittest.TestCase):
    maxDiff = 4000

    def sim_env(self, extra=None):
        # Exactly what `deploy/onsale sim` gives the simulator: the variables of `env`.
        out = subprocess.run(["bash", "-c", 'eval "$("$0" env)" && env -0', S.script],
                             cwd=S.source, env=S.env(), capture_output=True, timeout=60,
                             check=True).stdout
        env = dict(kv.split("=", 1) for kv in out.decode().split("\0") if "=" in kv)
        env["ONSALE_CTL"] = S.script
        # As `deploy/onsale sim` does: no PGPASSWORD. onsale-sim puts the password of
        # ONSALE_PG_PASSWORD_FILE into its own conninfo; in the environment it would reach
        # the operator commands' `deploy/onsale up`, whose psql logs in as postgres with it.
        env.pop("PGPASSWORD", None)
        env.update(extra or {})
        return env

    def run_sim(self, scenario, extra_env=None, expect_rc=0, path=None, scale=SCALE):
        # Through `deploy/onsale sim`, as an operator runs it, in either topology.
        out_dir = os.path.join(S.root, "sim-" + scenario)
        path = path or os.path.join(S.source, "loadgen", "scenarios", scenario + ".json")
        env = S.env()
        env.update(extra_env or {})
        p = subprocess.run([S.script, "sim", "--no-progress", "--scale", scale, "--out", out_dir,
                            path], cwd=S.source, env=env, capture_output=True, text=True,
                           timeout=SIM_TIMEOUT, stdin=subprocess.DEVNULL)
        stack.note(f"{scenario}:\n{p.stdout[-3000:]}")
        if expect_rc is not None:
            self.assertEqual(p.returncode, expect_rc,
                             f"onsale-sim {scenario} exited {p.returncode}\nstdout:\n"
                             f"{p.stdout[-4000:]}\nstderr:\n{p.stderr[-3000:]}\n{S.log_tails()}")
        self.assertIn(p.returncode, (0, 1), p.stderr[-3000:])
        with open(os.path.join(out_dir, "report.json")) as f:
            rep = json.load(f)
        return rep, p.stdout, out_dir

    def assertCleanNight(self, rep, out):
        self.assertEqual(rep["violations"], [], out)
        self.assertEqual(rep["headline"]["audit"], "clean")
        self.assertIn("audit: clean", out)
        # Everyone got a place, every answer was recorded, nobody was left hanging.
        self.assertEqual(rep["outcomes"]["cut"], 0, out)
        self.assertEqual(rep["outcomes"]["error"], 0, out)
        self.assertIsNotNone(rep["headline"]["all_placed_after_last_arrival_s"])

    def paysim_settings(self, method, body):
        c = stack.Client(S.paysim_port, S.ctx)
        try:
            r = c.request(method, "/v1/settings", body)
        finally:
            c.close()
        self.assertEqual(r.status, 200, r.body)
        return r.json

    def test_seed_night_sells_exactly_the_inventory(self):
        # An earlier run left the provider failing every charge; the scenario names no
        # error_rate, so the night must run on the simulator's default (PUT /v1/settings),
        # not on what was left behind.
        self.assertEqual(self.paysim_settings("PATCH", {"error_rate": 1})["error_rate"], 1)
        rep, out, out_dir = self.run_sim("seed-night-small")
        self.assertEqual(self.paysim_settings("GET", None)["error_rate"], 0, out)
        self.assertCleanNight(rep, out)
        # Refusals are counted by cause, and the report says what paced the night.
        taken = rep["endpoints"]["hold"]["by_cause"].get("409 seat_unavailable", 0)
        self.assertEqual(taken, rep["endpoints"]["hold"]["by_class"]["4xx"], out)
        self.assertIn("409 seat_unavailable", out)
        self.assertTrue(rep["headline"]["paced_by"], out)
        # 64 fans per address (a CGNAT address' share) arrive within a second: the
        # per-address join limit admits them all, no 429 wall stretches the night.
        self.assertEqual(rep["endpoints"]["join"]["by_cause"].get("429 rate_limited", 0), 0,
                         out)
        self.assertIn("paced by ", out)
        # Every process of the stack is measured, in either topology.
        names = {s["name"] for s in rep["services"]}
        self.assertTrue({"gateway", "gateway-1"} & names and {"reserve", "reserve-1"} & names,
                        names)
        inv = rep["figures"]["inventory"]
        self.assertEqual(inv["sold"], inv["seats"], out)      # exactly the 20 seats sold
        self.assertEqual(rep["headline"]["units_bought"], inv["seats"])
        self.assertEqual(rep["figures"]["money"]["bookings"], rep["outcomes"]["bought"])
        self.assertEqual(rep["figures"]["fifo"]["inversions"], 0)
        # The audit read the reserve's reconciliation export (it agreed with the ledger).
        self.assertEqual(rep["figures"]["reconciliation"]["charges"],
                         rep["figures"]["money"]["kept_charges"])
        # Every admitted loser was told "taken" by the reserve, and the table says how fast.
        self.assertGreater(rep["outcomes"]["lost"], 0)
        self.assertGreater(rep["latencies"]["hold_taken"]["count"], 0)
        # ... split into its parts: the holds' time before the wire (the simulator's own
        # connection queue) and on the wire, beside the simulator's own loop lag
        lat = rep["latencies"]
        for part in ("loser_waited", "loser_on_the_wire"):
            self.assertEqual(lat[part]["count"], rep["outcomes"]["lost"], part)
            self.assertLessEqual(lat[part]["p50_ms"], lat["loser_heard_taken"]["max_ms"], part)
        self.assertGreater(lat["simulator_loop_lag"]["count"], 0)
        self.assertIn("of it, holds before the wire", out)
        self.assertGreater(rep["endpoints"]["join"]["count"], 0)
        self.assertIn("join", out)
        # The watermark over time (what the ETA audit measures against) was recorded: it
        # reached every admitted fan's number.
        o = rep["outcomes"]
        self.assertGreaterEqual(max(rep["series"]["watermark"]), o["bought"] + o["lost"], out)
        # The room follows the stock (docs/design.md, "A queue that knows the stock"): once
        # every seat was held or sold, the rest of the crowd was told "sold out" instead of
        # being let in to find nothing — far fewer losers than fans left over.
        self.assertGreater(o.get("sold_out", 0), 0, out)
        self.assertLess(o["lost"], o.get("sold_out", 0), out)
        self.screenshot(out_dir)

    def test_prequeue_order_is_a_uniform_shuffle(self):
        rep, out, _ = self.run_sim("prequeue-fairness-small")
        self.assertCleanNight(rep, out)
        pq = rep["figures"]["prequeue"]
        self.assertGreater(pq["fans"], 100, out)
        self.assertGreaterEqual(pq["p_spearman"], pq["p_min"])
        self.assertGreaterEqual(pq["p_chi2"], pq["p_min"])
        self.assertEqual(rep["figures"]["fifo"]["inversions"], 0, out)

    def rates_scaled(self, scenario):
        """The scenario with its admission rates and max_active scaled like its fans.

        --scale shrinks the crowd only; at 0.25 the stadium's 750 fans arrive slower than
        its 1,000/s admit them, no queue forms, and no fan waits long enough to abandon
        it. Scaled together, the queue keeps its depth in seconds."""
        with open(os.path.join(S.source, "loadgen", "scenarios", scenario + ".json")) as f:
            doc = json.load(f)
        k = float(SCALE)
        for patch in [doc["room"]] + [o["patch"] for o in doc.get("operator", [])
                                      if "patch" in o]:
            for key in ("rate_per_minute", "max_active"):
                if patch.get(key):
                    patch[key] = max(1, int(patch[key] * k))
        path = os.path.join(S.root, scenario + "-rates-scaled.json")
        with open(path, "w") as f:
            json.dump(doc, f)
        return path

    def test_stadium_with_every_behaviour(self):
        rep, out, _ = self.run_sim("stadium-small", path=self.rates_scaled("stadium-small"))
        self.assertCleanNight(rep, out)
        o = rep["outcomes"]
        for k in ("bought", "abandoned", "vanished"):
            self.assertGreater(o[k], 0, f"no fan {k}: {out}")
        # Double clicks reached the reserve (more confirm requests than purchases).
        self.assertGreater(rep["endpoints"]["confirm"]["count"], o["bought"])
        # Losers who pressed "I'm done" left max_active's count: the reserve said 200.
        done = rep["endpoints"]["done"]
        self.assertGreater(done["count"], 0, out)
        self.assertEqual(done["by_class"]["2xx"], done["count"], done["by_class"])
        # The operator's rate change, pause, resume and max_active were all accepted.
        ops = [t for t in rep["timeline"] if t["label"].startswith("operator:")]
        self.assertEqual(len(ops), 4, rep["timeline"])
        for t in ops:
            self.assertEqual(t.get("status"), 200, t)
        # Demand above supply, a room that follows the stock: the fans told "sold out, for
        # now" keep their places (returns_patience_s) and the units that come back from
        # fans who vanished holding, paid too slowly or were declined find buyers — at least
        # 99% of the inventory sold (the scenario's audit.sold_share_min, which the clean
        # audit also holds it to), the night ending by itself, nobody cut.
        h = rep["headline"]
        self.assertEqual(rep["figures"]["sold_share"]["min"], 0.99)
        self.assertGreaterEqual(h["sold_share"], 0.99, out)
        self.assertAlmostEqual(h["sold_share"], h["units_bought"] / h["inventory_units"])
        self.assertIn("of the inventory sold", out)
        self.assertGreater(o["sold_out"], 0, out)  # fans were told "sold out"
        # An ETA told before the stock-out could not foresee it: the fans told "sold out,
        # for now" are left out of the ETA figures, and the report says how many.
        for k in ("eta_error", "eta_error_as_seen_by_fans"):
            self.assertGreater(rep["figures"][k]["excluded_sold_out_for_now"], 0, out)
        self.assertRegex(out, r'[1-9][0-9]* fans told "sold out, for now" left out')
        # The fans' seat map was read from the reserve as the night went on.
        self.assertGreater(rep["endpoints"]["seats"]["by_class"]["2xx"], 0, out)

    def test_eta_holds_with_noshows_and_a_rate_change(self):
        # 30% of the fans leave the queue at once and never poll again, and the operator
        # doubles the rate mid-queue: the ETA a fan is told (at join, or at the first poll
        # once the change is known) holds at p90 against the watermark (the scenario's
        # eta_p90_max, 20%: 13% measured here, 36% before the ETA counted the no-shows
        # ahead) and as the fans saw it (20–23% measured; the goal of 10% is met by the
        # larger night, noshow-ratechange.json, not yet by this short one).
        rep, out, _ = self.run_sim("noshow-ratechange-small", scale=ETA_SCALE)
        self.assertCleanNight(rep, out)
        self.assertGreater(rep["outcomes"]["abandoned"], 0, out)
        ops = [t for t in rep["timeline"] if t["label"].startswith("operator:")]
        self.assertEqual([t.get("status") for t in ops], [200], rep["timeline"])
        for k, most in (("eta_error", 0.20), ("eta_error_as_seen_by_fans", 0.30)):
            e = rep["figures"][k]
            # enough fans to speak of a p90: ~400 audited at full size (100 required),
            # fewer when the suite scales the night down (ONSALE_SIM_SCALE 0.25 under
            # ASan: 300 fans, ~40 audited)
            self.assertGreater(e["fans"], 100 * float(ETA_SCALE), f"{k}: {e}\n{out}")
            self.assertLessEqual(e["p90"], most, f"{k}: {e}\n{out}")

    @unittest.skipIf(stack.topology() == "cluster",
                     "one Redis node and one reserve by nature: the night's operator actions "
                     "restart the single Redis, SIGKILL and restart the one reserve, and add a "
                     "second gateway; the cluster's faults are test_cluster_failover and "
                     "test_rolling_restart")
    def test_faults_night_stays_correct(self):
        gw2, port = self.second_gateway()
        try:
            rep, out, _ = self.run_sim("faults-small", {
                "ONSALE_SIM_GATEWAYS": f"https://127.0.0.1:{port}",
                "ONSALE_SIM_GATEWAY2_PID": str(gw2.pid)})
        finally:
            if gw2.poll() is None:
                gw2.send_signal(signal.SIGKILL)
            gw2.wait(10)
        self.assertCleanNight(rep, out)
        ran = {t["label"]: t for t in rep["timeline"]}
        for label in ("restart Redis", "SIGKILL the reserve, start it again",
                      "kill the second gateway"):
            self.assertEqual(ran[label].get("exit"), 0, f"{label}: {ran.get(label)}")
        self.assertIsNotNone(gw2.poll(), "the second gateway was not killed")

    def test_audit_names_a_forged_booking_and_a_stranded_seat(self):
        # A booking nobody paid for, written behind the reserve's back mid-night: the audit
        # must fail and name the check.
        forge = ("PGPASSWORD=$(cat \"$ONSALE_PG_PASSWORD_FILE\" 2>/dev/null) "
                 "psql \"$ONSALE_PG_CONNINFO\" -q -c \"INSERT INTO bookings (booking_id, "
                 "event_id, buyer, checkout_id, hold_id, quantity, amount, currency) VALUES "
                 "('bk-forged-$SIM_EVENT', '$SIM_EVENT', 'nobody', 'co-forged-$SIM_EVENT', "
                 "'h-forged', 1, 100, 'EUR')\"")
        scen = os.path.join(S.root, "forged.json")
        with open(os.path.join(S.source, "loadgen", "scenarios", "seed-night-small.json")) as f:
            doc = json.load(f)
        # And a seat marked sold in Redis that Postgres never booked: a lost sale.
        strand = ("if [ -n \"$ONSALE_REDIS_PASSWORD_FILE\" ]; then set -- --no-auth-warning "
                  "--user \"$ONSALE_REDIS_USER\" --pass \"$(cat \"$ONSALE_REDIS_PASSWORD_FILE\")\"; fi; "
                  "redis-cli -c -p \"$ONSALE_REDIS_PORT\" \"$@\" SET \"os:{$SIM_EVENT}:s:A-2-10\" "
                  "sold >/dev/null")
        doc.update(name="forged", fans=300,
                   operator=[{"at_s": 0.5, "exec": forge, "label": "forge a booking"},
                             # before any fan can be admitted (a join, a poll, an
                             # admission: over 100 ms), so no fan buys that seat first
                             {"at_s": 0.0, "exec": strand, "label": "strand a seat"}])
        with open(scen, "w") as f:
            json.dump(doc, f)
        binary = os.path.join(S.build, "loadgen", "sim", "onsale-sim")
        p = subprocess.run([binary, "--no-progress", "--out", os.path.join(S.root, "forged"),
                            scen], env=self.sim_env(), capture_output=True, text=True,
                           timeout=SIM_TIMEOUT, stdin=subprocess.DEVNULL)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("VIOLATION booking_without_charge", p.stdout)
        self.assertIn("VIOLATION inventory_leak", p.stdout)

    def test_bad_scenario_is_a_clear_error(self):
        bad = os.path.join(S.root, "bad.json")
        with open(bad, "w") as f:
            f.write('{"name": "x", "fans": 10, "inventory": {"seats": []}, "room": {}, '
                    '"behaviours": {"vanish_holdin": 0.1}}')
        binary = os.path.join(S.build, "loadgen", "sim", "onsale-sim")
        p = subprocess.run([binary, bad], env=self.sim_env(), capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(p.returncode, 2)
        self.assertIn("scenario:", p.stderr)

    # -- helpers

    def second_gateway(self):
        """A second gateway on its own port against the same Redis (as gwstack.py does)."""
        port, admin_port = stack._free_ports(2)
        with open(os.path.join(S.state, f"{S.gateway_names[0]}.conf")) as f:
            conf = re.sub(r"^port = .*$", f"port = {port}", f.read(), flags=re.M)
            conf = re.sub(r"^admin_listen = .*$", f"admin_listen = 127.0.0.1:{admin_port}", conf,
                          flags=re.M)
        path = os.path.join(S.state, "gateway-extra.conf")
        with open(path, "w") as f:
            f.write(conf)
        log = open(os.path.join(S.root, "gateway-extra.log"), "ab")
        self.addCleanup(log.close)
        p = subprocess.Popen([os.path.join(S.build, "gateway", "onsale-gateway"), "--config",
                              path], stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL,
                             env={k: v for k, v in S.env().items()
                                  if not k.startswith("ONSALE_GATEWAY_")})

        def ready():
            if p.poll() is not None:
                raise RuntimeError(f"gateway 2 exited {p.returncode}")
            c = stack.Client(port, S.ctx, timeout=5)
            try:
                return c.get("/readyz").status == 200
            finally:
                c.close()
        stack.wait_for(ready, 30, interval=0.1, what="gateway 2 /readyz")
        return p, port

    def screenshot(self, out_dir):
        """The HTML report in headless Chromium: it renders from file:// with no network."""
        if not os.access(CHROMIUM, os.X_OK):
            self.skipTest(f"{CHROMIUM} not installed")
        png = os.path.join(out_dir, "report.png")
        p = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                            "--hide-scrollbars", "--window-size=1280,1800",
                            f"--screenshot={png}", "file://" + os.path.join(out_dir, "report.html")],
                           capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, HOME=S.root))
        self.assertTrue(os.path.exists(png), p.stderr[-2000:])
        self.assertGreater(os.path.getsize(png), 20000, "the screenshot looks empty")
        keep = os.environ.get("ONSALE_SIM_SCREENSHOT")
        if keep:
            shutil.copyfile(png, keep)


if __name__ == "__main__":
    unittest.main()
