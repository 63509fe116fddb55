"""The operator's side of the night: the gateway keeps the last minutes of
every waiting room (a bounded ring per room, sampled by a timer) and serves them at
GET /admin/events/{event}/history; the dashboard's charts open with that history and
label their y axes with distinct values.

The stack samples every 200 ms into 20 slots so the ring fills within seconds.
The browser half (tests/integration/browser/dashboard.mjs) skips, with the reason, only
when chromium, node or node_modules are missing.
"""

import json
import os
import subprocess
import time
import unittest

import stack
from test_gateway_browser import BROWSER_DIR, CHROMIUM, NODE, SKIP as BROWSER_SKIP

INTERVAL_MS = 200
SAMPLES = 20


class HistoryStack(stack.Stack):
    def env(self):
        e = super().env()
        e["ONSALE_GATEWAY_HISTORY_INTERVAL_MS"] = str(INTERVAL_MS)
        e["ONSALE_GATEWAY_HISTORY_SAMPLES"] = str(SAMPLES)
        return e


def setUpModule():
    stack.module_own_stack(HistoryStack("shop-dash"))


def admin_port(s):
    """The gateway's admin listener when the stack has one, else its only listener."""
    return getattr(s, "gateway_admin_port", None) or s.gateway_port


class History(unittest.TestCase):
    @property
    def S(self):
        return stack._CURRENT

    def admin(self):
        c = stack.Client(admin_port(self.S), self.S.ctx)
        self.addCleanup(c.close)
        return c

    def room_with_one_fan(self, prefix):
        """A paused room with one fan in line (queue_size 1: the axis that used to read
        "0, 0, 1, 1, 1")."""
        ev = stack.new_id(prefix)
        r = self.admin().put(f"/admin/events/{ev}", {"rate_per_minute": 60, "paused": True,
                                                      "mode": "fifo"}, token=self.S.gateway_admin_token)
        self.assertIn(r.status, (200, 201), r)
        c = stack.Client(self.S.gateway_port, self.S.ctx)
        try:
            r = c.post(f"/q/{ev}/join", {})
            self.assertEqual(r.status, 201, r)
        finally:
            c.close()
        return ev

    def history(self, ev, token=None):
        return self.admin().get(f"/admin/events/{ev}/history",
                                token=self.S.gateway_admin_token if token is None else token)

    def test_history_is_a_bounded_ring_oldest_first(self):
        ev = self.room_with_one_fan("hist")
        time.sleep((SAMPLES + 5) * INTERVAL_MS / 1000)
        r = self.history(ev)
        self.assertEqual(r.status, 200, r)
        h = r.json
        self.assertEqual(h["event"], ev)
        self.assertEqual(h["interval_ms"], INTERVAL_MS)
        self.assertEqual(h["capacity"], SAMPLES)
        self.assertEqual(h["fields"][0], "queue_size")
        self.assertEqual(len(h["samples"]), SAMPLES, "the ring keeps exactly history_samples")
        times = [s[0] for s in h["samples"]]
        self.assertEqual(times, sorted(times), "oldest first")
        self.assertEqual(len(set(times)), len(times))
        span = (times[-1] - times[0]) / 1000
        self.assertLess(span, SAMPLES * INTERVAL_MS / 1000 * 2, "older samples were dropped")
        self.assertGreater(time.time() - times[0] / 1000, span - 1)
        q = h["fields"].index("queue_size") + 1
        self.assertEqual(h["samples"][-1][q], 1, "the fan in line is in the latest sample")
        for s in h["samples"]:
            self.assertEqual(len(s), 1 + len(h["fields"]))

    def test_history_errors(self):
        self.assertEqual(self.history("no-such-room").status, 404)
        self.assertEqual(self.history("no-such-room").json["error"], "unknown_event")
        self.assertEqual(self.history("x", token="wrong").status, 401)
        self.assertEqual(self.admin().get("/admin/events/bad%20id/history",
                                          token=self.S.gateway_admin_token).status, 400)
        ev = self.room_with_one_fan("hist-del")
        self.assertEqual(self.admin().request("DELETE", f"/admin/events/{ev}",
                                              token=self.S.gateway_admin_token).status, 200)
        self.assertEqual(self.history(ev).status, 404, "a deleted room has no history")

    @unittest.skipIf(BROWSER_SKIP, BROWSER_SKIP or "")
    def test_dashboard_opens_with_history_and_distinct_axis_labels(self):
        ev = self.room_with_one_fan("hist-br")
        time.sleep(8 * INTERVAL_MS / 1000)
        args = [NODE, os.path.join(BROWSER_DIR, "dashboard.mjs"),
                "--url", f"https://127.0.0.1:{admin_port(self.S)}", "--ca", self.S.ca,
                "--token-file", os.path.join(self.S.state, "gateway-admin-token"), "--event", ev,
                "--chromium", CHROMIUM]
        p = subprocess.run(args, cwd=BROWSER_DIR, capture_output=True, timeout=120,
                           stdin=subprocess.DEVNULL)
        out = p.stdout.decode("utf-8", "replace").strip()
        err = p.stderr.decode("utf-8", "replace").strip()
        res = json.loads(out.splitlines()[-1]) if out else {}
        failed = [c for c in res.get("checks", []) if not c.get("ok")]
        self.assertTrue(res.get("ok"), f"{res.get('error')}\nfailed: {failed}\n{err[-2000:]}")
        ticks = {t["id"]: t["ticks"] for t in res["ticks"]}
        self.assertEqual(ticks["c-queue_size"], ["0", "1"], "one fan in line: the axis reads 0, 1")
        self.assertTrue(os.path.exists(os.path.join(BROWSER_DIR, "out", "dashboard.png")))


if __name__ == "__main__":
    unittest.main()
