"""Rolling restart under load (cluster topology): every gateway and every reserve is sent
SIGTERM and started again, one by one, while clients keep joining queues, polling their
place and reading availability through HAProxy. Clients see zero failed requests:
SIGTERM turns /readyz to 503 and replies to `Connection: close` for drain_grace_ms while
the listener still accepts (HAProxy's health check takes the server out), then the
listener closes and in-flight requests finish; the next instance is restarted only once
HAProxy reports the previous one UP again.

Clients behave like browsers: keep-alive connections, and a request that finds its idle
keep-alive connection closed before any answer is sent again on a new one (stack.Client).
"""

import os
import signal
import time
import unittest

import cluster_util as cu
import stack
from stack import Client, wait_for

S = None


def setUpModule():
    global S
    S = cu.module_cluster_stack("rolling")


class RollingRestart(stack.ReserveTestCase):
    def test_every_instance_restarted_under_load_zero_failed_requests(self):
        ev = self.new_event(pools=[{"id": "floor", "capacity": 1000, "price": 5000}],
                            max_per_buyer=4)
        r = S.gateway_admin("PUT", f"/admin/events/{ev}", {"rate_per_minute": 600})
        self.assertIn(r.status, (200, 201), repr(r))

        def avail(st):
            c = st.setdefault("c", Client(S.reserve_port, S.ctx, timeout=10))
            return c.get(f"/v1/events/{ev}/availability").status

        def join_and_poll(st):
            c = st.setdefault("c", cu.gateway_client(S))
            t = st.get("ticket")
            if t is None:  # one place per client (joins are limited per address)
                r = c.post(f"/q/{ev}/join")
                if r.status == 201:
                    st["ticket"] = r.json["ticket"]
            else:
                r = c.get(f"/q/{ev}/status", token=t)
            st["n"] = st.get("n", 0) + 1
            return r.status

        def hold_and_release(st):
            c = st.setdefault("c", Client(S.reserve_port, S.ctx, timeout=10))
            st["i"] = st.get("i", 0) + 1
            tok = S.token(ev, f"roller-{id(st)}-{st['i']}")
            r = c.post(f"/v1/events/{ev}/holds", {"pool": "floor", "quantity": 1}, token=tok)
            if r.status == 201:
                d = c.delete(f"/v1/holds/{r.json['hold_id']}", token=tok)
                if d.status not in (200, 204):
                    return d.status
            return r.status

        load = cu.Load({"availability": avail, "queue": join_and_poll,
                        "holds": hold_and_release}, threads_per_fn=2, max_s=240).start()
        restarted = []
        try:
            time.sleep(1.0)
            for name, backend in (("gateway-1", "gateways"), ("gateway-2", "gateways"),
                                  ("reserve-1", "reserves"), ("reserve-2", "reserves")):
                pid = cu.pid_of(S, name)
                t0 = time.monotonic()
                os.kill(pid, signal.SIGTERM)
                wait_for(lambda: cu.server_status(S)[(backend, name)].startswith("DOWN"), 15,
                         interval=0.05, what=f"HAProxy marks {name} DOWN")
                wait_for(lambda: not cu.alive(pid), 30, interval=0.05, what=f"{name} exits")
                cu.up(S)  # starts the missing instance, waits for its /readyz
                wait_for(lambda: cu.server_status(S)[(backend, name)] == "UP", 15,
                         interval=0.05, what=f"HAProxy marks {name} UP")
                self.assertNotEqual(cu.pid_of(S, name), pid)
                restarted.append((name, round(time.monotonic() - t0, 2)))
            time.sleep(1.0)
        finally:
            results = load.stop()
        ok = {"availability": {200}, "queue": {200, 201}, "holds": {201}}
        failed = [r for r in results if r[2] not in ok[r[1]]]
        counts = {k: sum(1 for r in results if r[1] == k) for k in ok}
        stack.note(f"rolling restart: {restarted}; requests {counts}; failed {len(failed)}")
        self.assertEqual(len(restarted), 4)
        for k, n in counts.items():
            self.assertGreater(n, 20, f"too little {k} load to mean anything: {counts}")
        kinds = {}
        for r in failed:
            kinds[(r[1], r[2])] = kinds.get((r[1], r[2]), 0) + 1
        self.assertEqual(kinds, {}, f"{len(failed)} failed of {len(results)}")


if __name__ == "__main__":
    unittest.main()
