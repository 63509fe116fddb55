"""A Redis Cluster master killed mid-sale (cluster topology: 3 masters, 3 replicas,
cluster-node-timeout 2 s). Buyers keep holding and confirming through HAProxy while the
master that serves the event's hash slot is SIGKILLed. Its replica is promoted; cm_redis
follows the new slot map; the sale resumes within the cluster's failover time (plus one
map refresh); no unit is sold twice (Postgres' booking_items key is the authority, and
every confirmation answered 201 has its booking); every fan keeps their place in the
paused queue (the gateways' tickets and recovery outlive a lost asynchronous write).
"""

import os
import signal
import threading
import time
import unittest
import uuid

import cluster_util as cu
import stack
from stack import Client, key_slot, wait_for
from test_saga_flows import TERMINAL, SagaCase

S = None


def setUpModule():
    global S
    S = cu.module_cluster_stack("failover")


class MasterFailover(SagaCase):
    def test_kill_the_events_master_mid_sale(self):
        cap = 400
        ev = self.new_event(pools=[{"id": "floor", "capacity": cap, "price": 2500}],
                            max_per_buyer=4)
        # a paused room: places must not move; 15 fans hold one (under the per-address
        # join burst: through HAProxy they all come from 127.0.0.1)
        gw = cu.gateway_client(S)
        r = S.gateway_admin("PUT", f"/admin/events/{ev}", {"rate_per_minute": 60,
                                                           "paused": True})
        self.assertIn(r.status, (200, 201), repr(r))
        fans = []
        for i in range(15):
            j = gw.post(f"/q/{ev}/join")
            self.assertStatus(j, 201, msg=f"join {i}:")
            fans.append((j.json["ticket"], j.json["position"]))

        R = S.new_redis()
        slot = key_slot("{%s}" % ev)
        R.refresh()
        old_port = R.slots[slot]
        node = S.redis_ports.index(old_port) + 1

        sold = []  # (checkout_id, booking_id, quantity) of every confirmation answered 201
        tried = []  # (hold_id, token, amount, Idempotency-Key, status or exception name)
        outcomes = {}
        lock = threading.Lock()
        stop = threading.Event()
        first_ok_after = {}

        def buyer(n):
            c = Client(S.reserve_port, S.ctx, timeout=15)
            k = 0
            try:
                while not stop.is_set():
                    k += 1
                    tok = S.token(ev, f"buyer-{n}-{k}")
                    t = time.monotonic()
                    try:
                        h = c.post(f"/v1/events/{ev}/holds", {"pool": "floor", "quantity": 1},
                                   token=tok)
                        code = h.status
                        if code == 201:
                            key = uuid.uuid4().hex
                            attempt = [h.json["hold_id"], tok, h.json["amount"], key, "sent"]
                            with lock:
                                tried.append(attempt)
                            cf = c.post(f"/v1/holds/{h.json['hold_id']}/confirm",
                                        {"payment": {"amount": h.json["amount"],
                                                     "currency": "EUR", "source": "tok_visa"}},
                                        token=tok, headers={"Idempotency-Key": key})
                            code = ("confirm", cf.status)
                            attempt[4] = cf.status
                            if cf.status == 201:
                                with lock:
                                    sold.append((cf.json["checkout_id"], cf.json["booking_id"],
                                                 cf.json["quantity"]))
                                    if "kill" in first_ok_after and "t" not in first_ok_after \
                                            and t > first_ok_after["kill"]:
                                        first_ok_after["t"] = time.monotonic()
                    except Exception as e:  # noqa: BLE001 — counted; a failover may cut a call
                        code = type(e).__name__
                    with lock:
                        outcomes[code] = outcomes.get(code, 0) + 1
                    if code == 409 or code == ("confirm", 409):
                        break  # sold out
            finally:
                c.close()

        threads = [threading.Thread(target=buyer, args=(n,), daemon=True) for n in range(4)]
        for th in threads:
            th.start()
        time.sleep(2.0)
        pid = cu.pid_of(S, f"redis-{node}")
        before = len(sold)
        with lock:
            first_ok_after["kill"] = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        t_kill = first_ok_after["kill"]

        def promoted():
            try:
                R.refresh()
            except ConnectionError:
                return False
            return R.slots[slot] not in (None, old_port)
        wait_for(promoted, 30, interval=0.1, what="the replica promoted")
        failover_s = time.monotonic() - t_kill
        wait_for(lambda: "t" in first_ok_after, 30, interval=0.1,
                 what="a confirmed sale after the kill")
        resume_s = first_ok_after["t"] - t_kill
        time.sleep(2.0)
        stop.set()
        for th in threads:
            th.join(60)
        stack.note(f"failover: promoted after {failover_s:.1f}s, first sale after "
                   f"{resume_s:.1f}s; {before} sales before, {len(sold)} in all; {outcomes}")

        self.assertGreater(before, 0, "no sale before the kill: the load did not run")
        self.assertGreater(len(sold), before, "no sale after the failover")
        # resumes within the failover time plus a map refresh and a client deadline
        self.assertLess(resume_s, failover_s + 5.0)
        self.audit_the_money(ev, cap, sold, tried)
        # every fan keeps their place
        for ticket, pos in fans:
            st = gw.get(f"/q/{ev}/status", token=ticket)
            self.assertStatus(st, 200, msg="status after the failover:")
            self.assertLessEqual(st.json["position"], pos, repr(st))
        gw.close()
        R.close()

    def audit_the_money(self, ev, cap, sold, tried):
        """Every checkout of ev settled and audited against the provider's ledger."""
        def settled():
            rows = S.sql(f"select state from checkouts where event_id = '{ev}'")
            return rows and all(r[0] in TERMINAL for r in rows)
        # The reconciler settles what the failover cut (after its reconcile_after_s, 30 s).
        wait_for(settled, 120, interval=0.5, what="every checkout of the event settled")
        audit = self.audit_event(ev)  # kept charge ↔ one booking; charge, no booking: refunded
        by_key = {k: (cid, hid) for cid, k, hid in S.sql(
            f"select checkout_id, idem_key, hold_id from checkouts where event_id = '{ev}'")}
        # every buyer told "confirmed" has that booking and kept the charge
        booked = dict(S.sql(f"select checkout_id, booking_id from bookings "
                            f"where event_id = '{ev}'"))
        for cid, bid, _ in sold:
            self.assertEqual(audit.get(cid), "charged+booked", cid)
            self.assertEqual(booked.get(cid), bid, f"{cid}: confirmed, not that booking")
        # the confirmations the failover cut: each checkout is in the audit, and a replay of
        # its key answers what the ledger says
        cut = [a for a in tried if a[4] != 201]
        seen = {}
        for hold_id, tok, amount, key, status in cut:
            if key not in by_key:
                seen["never recorded"] = seen.get("never recorded", 0) + 1
                continue  # the request never reached Postgres: no checkout, no charge
            cid, hid = by_key[key]
            self.assertEqual(hid, hold_id)
            outcome = audit[cid]
            seen[outcome] = seen.get(outcome, 0) + 1
            r = self.c.post(f"/v1/holds/{hold_id}/confirm",
                            {"payment": {"amount": amount, "currency": "EUR",
                                         "source": "tok_visa"}},
                            token=tok, headers={"Idempotency-Key": key})
            if outcome == "charged+booked":
                self.assertEqual((r.status, r.json.get("booking_id")), (200, booked[cid]),
                                 f"{cid} (cut: {status}): {r!r}")
            else:
                self.assertNotIn(r.status, (200, 201), f"{cid} (cut: {status}): {r!r}")
                if outcome == "refunded":
                    self.assertEqual(r.json["refund"]["amount"], amount, repr(r))
        keys = [a[3] for a in tried]
        self.assertEqual(len(keys), len(set(keys)))
        self.assertEqual(set(by_key) - set(keys), set(), "a checkout no buyer asked for")
        # the bookings are the audited ones, within capacity, no unit twice
        self.assertEqual(set(booked), {c for c, o in audit.items() if o == "charged+booked"})
        units = [r[0] for r in S.sql(f"select seat_id from booking_items "
                                     f"where event_id = '{ev}'")]
        self.assertEqual(len(units), len(set(units)))
        self.assertLessEqual(len(units), cap)
        stack.note(f"failover audit: {len(tried)} confirmations, {len(sold)} answered 201, "
                   f"{len(cut)} cut or refused: {seen}; {len(booked)} bookings")


if __name__ == "__main__":
    unittest.main()
