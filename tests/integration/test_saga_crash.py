"""Checkout saga under failure (docs/design.md invariant 8):

- crash at every step: a reserve started with ONSALE_RESERVE_FAULT=<point> SIGKILLs itself
  right before/after committing that transition; one such process per checkout; then the
  reconciler (the stack's reserve and a freshly started one) finishes everything. For
  every checkout: a terminal state and exactly one of {one charge, one booking} /
  {charge refunded, no booking} / {no charge, no booking}, checked against Postgres and
  the simulator's ledger;
- several reserves reconciling at once: no checkout processed twice, no double refund;
- Postgres restarted mid-checkout: 503 with Retry-After, the retry with the same key
  completes, nothing lost.

Extra reserve processes are started here from the stack's reserve.conf (own port, own
log), tracked by pid and killed by pid.
"""

import collections
import json
import os
import signal
import subprocess
import sys
import threading
import time
import unittest
import uuid

import stack
from stack import wait_for
from test_saga_flows import SagaCase, payment, saga_stack

PG_BIN = os.environ.get("ONSALE_PG_BIN", "/usr/lib/postgresql/15/bin")

# (fault point, payment source, hold ttl seconds or None): the sources steer the
# simulator so that each point is actually reached.
CRASH_PLAN = [
    ("before:created", "tok_visa", None),  # the hold extended, nothing recorded yet
    ("after:payment_requested", "tok_visa", None),  # created…payment_requested: one commit
    ("before:paid", "tok_visa", None),  # charged, nothing recorded (paid is not a commit)
    ("before:converted", "tok_visa", None),  # charged and converted in Redis, not booked
    ("after:confirmed", "tok_visa", None),  # one commit: the charge, paid…confirmed
    ("after:declined", "tok_chargeDeclined", None),
    ("before:failed", "tok_chargeDeclined", None),
    ("after:unknown", "tok_sim_late", None),
    ("after:unknown", "tok_sim_lost", None),
    ("before:refunding", "tok_sim_delay_1300", 1),  # charged, the hold expired: not recorded
    ("after:refunding", "tok_sim_delay_1300", 1),  # the charge and refunding, one commit
    ("before:refunded", "tok_sim_delay_1300", 1),
]
ROUNDS = 3  # the plan runs this many times (each checkout its own process)
# Points that leave no checkout behind: nobody but the buyer can move it on, so the test
# retries the confirm (same key) on the stack's reserve, which must complete it.
RETRIED = {"before:created"}


def setUpModule():
    saga_stack("saga-crash")


class Reserves:
    """Extra reserve processes on the stack's config, each on its own port."""

    def __init__(self, s):
        self.s = s
        self.procs = []

    def start(self, extra_env=None, wait=True):
        port, admin_port = stack._free_ports(2)
        env = self.s.env()
        if self.s.cluster:  # beside the stack's two reserves: within Postgres' connections
            env["ONSALE_RESERVE_PG_POOL_SIZE"] = "8"
        env.update(extra_env or {})
        log = open(os.path.join(self.s.root, f"reserve-{port}.log"), "ab")
        p = subprocess.Popen([self.s.reserve_bin, "--config",
                              os.path.join(self.s.state, f"{self.s.reserve_names[0]}.conf"),
                              "--port", str(port),
                              f"--admin_listen=127.0.0.1:{admin_port}"],
                             env=env, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL)
        log.close()
        p.port = port
        p.admin_port = admin_port
        self.procs.append(p)
        if wait:
            def ready():
                c = stack.Client(port, self.s.ctx, timeout=2)
                try:
                    return c.get("/readyz").status == 200
                finally:
                    c.close()
            wait_for(ready, 30, interval=0.05, what=f"reserve on {port} ready")
        return p

    def client(self, p, timeout=10):
        return stack.Client(p.port, self.s.ctx, timeout=timeout)

    def metric(self, p, name, **labels):
        c = stack.Client(p.admin_port, self.s.ctx, timeout=10)
        try:
            r = c.get("/metrics")
        finally:
            c.close()
        return stack.metric_sum(stack.parse_metrics(r.body.decode()), name, **labels)

    def stop_all(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
        self.procs = []


class CrashEveryStep(SagaCase):
    def setUp(self):
        super().setUp()
        self.r = Reserves(self.S)
        self.addCleanup(self.r.stop_all)

    def test_crash_at_every_step_then_reconciled(self):
        seats = [{"id": f"S-{i}", "section": "S", "price": 5000} for i in range(1, 80)]
        ev_long = self.new_event("crash", seats=seats, max_per_buyer=100)
        ev_short = self.new_event("crash1", seats=seats, max_per_buyer=100,
                                  hold_ttl_seconds=1, checkout_extension_seconds=0,
                                  max_hold_seconds=1)
        n = 0
        extra = 0  # checkouts of holds that lapsed before their checkout started
        died = collections.Counter()
        for rnd in range(ROUNDS):
            for point, source, ttl in CRASH_PLAN:
                n += 1
                ev = ev_short if ttl else ev_long
                buyer = f"b{n}"
                tok = self.S.token(ev, buyer)
                # The process first, then the hold: its start-up must not eat into a
                # 1 s hold (on a loaded machine it can take longer than that).
                p = self.r.start({"ONSALE_RESERVE_FAULT": point,
                                  "ONSALE_RESERVE_RECONCILE_INTERVAL_MS": "600000"})
                for attempt in range(3):
                    h = self.hold(ev, tok, seats=[f"S-{n}"]).json
                    c = self.r.client(p, timeout=15)
                    key = uuid.uuid4().hex
                    resp = None
                    try:
                        resp = c.post(f"/v1/holds/{h['hold_id']}/confirm",
                                      payment(h["amount"], source), token=tok,
                                      headers={"Idempotency-Key": key})
                        got = f"{resp.status} {resp.body[:200]!r}"
                    except Exception as e:  # noqa: BLE001 — the process died mid-request
                        got = type(e).__name__
                    finally:
                        c.close()
                    # A 1 s hold that lapsed before the checkout started (a loaded
                    # machine): nothing charged, the checkout failed; try a new hold.
                    if not (ttl and resp is not None and resp.status == 409
                            and resp.err == "hold_expired" and "refund" not in resp.json):
                        break
                    extra += 1
                try:
                    rc = p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    rc = None
                self.assertEqual(rc, -signal.SIGKILL,
                                 f"{point} with {source}: the fault point was not reached "
                                 f"(answer {got}, exit {rc})")
                died[point] += 1
                if point in RETRIED:
                    self.assertIsNone(self.S.sql_value(
                        f"select checkout_id from checkouts where hold_id = '{h['hold_id']}'"),
                        f"{point}: a checkout was recorded")
                    again = self.confirm_src(h, tok, source, key=key)
                    self.assertStatus(again, 201, msg=f"{point}: the buyer's retry")
        # A restarted reserve (no fault) plus the stack's reserve reconcile everything.
        self.r.start()
        evs = f"'{ev_long}','{ev_short}'"

        def all_terminal():
            open_ = self.S.sql_value(
                f"select count(*) from checkouts where event_id in ({evs}) and state not in "
                f"('confirmed','failed','released','refunded')")
            return open_ == "0"
        wait_for(all_terminal, 90, interval=0.5, what="every crashed checkout terminal")
        outcomes = {}
        outcomes.update(self.audit_event(ev_long))
        outcomes.update(self.audit_event(ev_short))
        self.assertEqual(len(outcomes), n + extra)
        states = collections.Counter(self.S.sql_value(
            f"select state from checkouts where checkout_id = '{cid}'") for cid in outcomes)
        dist = collections.Counter(outcomes.values())
        sys.stderr.write(f"\n[crash test] {n} checkouts, {sum(died.values())} SIGKILLs at "
                         f"{len(set(p for p, _, _ in CRASH_PLAN))} fault points ({extra} holds lapsed "
                         f"before their checkout started); "
                         f"outcomes {dict(dist)}; final states {dict(states)}\n")
        # Every branch is represented.
        self.assertTrue(dist["charged+booked"] and dist["refunded"] and dist["nothing"], dist)


class BookingRace(SagaCase):
    """The booking confirms in one commit: two bookings of one paid checkout racing in
    Postgres leave one booking, both callers answer its id, and a replay of the buyer's
    confirm answers that same booking."""

    def setUp(self):
        super().setUp()
        self.r = Reserves(self.S)
        self.addCleanup(self.r.stop_all)

    def test_concurrent_bookings_of_one_paid_checkout_then_replay(self):
        ev = self.new_event("race", seats=[{"id": "B-1", "section": "B", "price": 4000}],
                            max_per_buyer=4)
        tok = self.S.token(ev, "racer")
        # A reserve that dies after the charge and the hold's conversion, right before the
        # booking: the checkout stays payment_requested (the charge is recorded only with
        # the booking) with the seat converted in Redis.
        p = self.r.start({"ONSALE_RESERVE_FAULT": "before:converted",
                          "ONSALE_RESERVE_RECONCILE_INTERVAL_MS": "600000"})
        h = self.hold(ev, tok, seats=["B-1"]).json
        key = uuid.uuid4().hex
        c = self.r.client(p, timeout=15)
        try:
            with self.assertRaises(Exception):  # the process dies mid-request
                c.post(f"/v1/holds/{h['hold_id']}/confirm", payment(h["amount"]), token=tok,
                       headers={"Idempotency-Key": key})
        finally:
            c.close()
        self.assertEqual(p.wait(timeout=15), -signal.SIGKILL)
        cid = self.S.sql_value(f"select checkout_id from checkouts where event_id = '{ev}'")
        self.assertEqual(self.checkout_state(cid), "payment_requested")
        charge = [ch["id"] for ch in self.pay.ledger(ev)["charges"]
                  if ch["status"] == "succeeded"][0]
        # Eight bookings of it at once, each with its own booking id and the charge.
        out = {}

        def book(i):
            body = json.dumps({"checkout_id": cid, "booking_id": f"bk_race{i}"})
            out[i] = self.S.sql(
                f"select outcome, booking_id from onsale_saga_book('{cid}', 'bk_race{i}', "
                f"NULL, '{{B-1}}'::text[], '{body}', 3, '{charge}')")[0]
        ts = [threading.Thread(target=book, args=(i,)) for i in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        self.assertEqual(len(out), 8, out)
        winners = {bk for _, bk in out.values()}
        self.assertEqual(len(winners), 1, out)
        self.assertEqual({o for o, _ in out.values()}, {"confirmed"}, out)
        won = winners.pop()
        self.assertEqual(self.S.sql(f"select booking_id from bookings where checkout_id = '{cid}'"),
                         [[won]])
        self.assertEqual(self.checkout_state(cid), "confirmed")
        tr = self.transitions(cid)
        self.assertEqual(tr.count(("payment_requested", "paid")), 1, tr)
        self.assertEqual(tr.count(("paid", "converted")), 1, tr)
        self.assertEqual(self.S.sql_value(
            f"select charge_id from checkouts where checkout_id = '{cid}'"), charge)
        self.assertEqual(tr.count(("converted", "confirmed")), 1, tr)
        self.assertIsNone(self.S.sql_value(
            f"select lease_until from checkouts where checkout_id = '{cid}' "
            f"and lease_until is not null"))
        # The buyer's replay (same key) answers the booking that won, with its stored body.
        again = self.confirm_src(h, tok, "tok_visa", key=key)
        self.assertStatus(again, 200)
        self.assertEqual(again.json["booking_id"], won, repr(again))
        self.assertEqual(again.json["checkout_id"], cid)
        self.assertEqual(len([ch for ch in self.pay.ledger(ev)["charges"]
                              if ch["status"] == "succeeded"]), 1)


class TwoReconcilers(SagaCase):
    def setUp(self):
        super().setUp()
        self.r = Reserves(self.S)
        self.addCleanup(self.r.stop_all)

    def test_several_reconcilers_no_double_processing_no_double_refund(self):
        ev = self.new_event("recon", seats=[{"id": f"R-{i}", "section": "R", "price": 7000}
                                            for i in range(1, 31)],
                            max_per_buyer=100, hold_ttl_seconds=1,
                            checkout_extension_seconds=0, max_hold_seconds=1)
        # Two more reserves reconciling eagerly, next to the stack's.
        fast = {"ONSALE_RESERVE_RECONCILE_INTERVAL_MS": "50"}
        a, b = self.r.start(fast), self.r.start(fast)
        # 12 checkouts left pending by a late provider answer: charged, hold expired by
        # the time the reconcilers see them → each must be refunded exactly once.
        cids = []
        for i in range(1, 13):
            tok = self.S.token(ev, f"r{i}")
            h = self.hold(ev, tok, seats=[f"R-{i}"]).json
            resp = self.confirm_src(h, tok, "tok_sim_late")
            self.assertStatus(resp, 202)
            cids.append(resp.json["checkout_id"])
        states = self.wait_terminal(cids, timeout=60)
        self.assertEqual(set(states.values()), {"refunded"}, states)
        for cid in cids:
            tr = self.transitions(cid)
            self.assertEqual(len(tr), len(set(tr)), f"{cid} processed twice: {tr}")
            self.assertEqual(tr.count(("refunding", "refunded")), 1, tr)
        led = self.pay.ledger(ev)
        self.assertEqual(len(led["refunds"]), len(cids), led["refunds"])
        self.assertEqual(len({rf["payment_intent"] for rf in led["refunds"]}), len(cids))
        self.assertEqual(set(self.audit_event(ev).values()), {"refunded"})
        claimed = [self.r.metric(p, "onsale_reserve_reconciler_actions_total", action="claimed")
                   for p in (a, b)]
        sys.stderr.write(f"\n[reconcilers] claims by the two extra reserves: {claimed}\n")


class PostgresRestart(SagaCase):
    def pg(self, *args):
        cmd = [os.path.join(PG_BIN, "pg_ctl"), "-D", os.path.join(self.S.state, "pg")] + list(args)
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--"] + cmd
        subprocess.run(cmd, check=True, timeout=60, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/")

    @unittest.skipIf(stack.topology() == "cluster",
                     "one Postgres by nature (pg_ctl on its data directory): on the cluster "
                     "topology a stopped primary is restarted by its keeper or failed over, "
                     "which test_cluster_pg_failover covers (test_1, test_5)")
    def test_postgres_restarted_mid_checkout_then_retry_completes(self):
        ev = self.new_event("pgre", seats=[{"id": "P-1", "section": "P", "price": 9000}],
                            max_per_buyer=4)
        tok = self.S.token(ev, "pg-buyer")
        h = self.hold(ev, tok, seats=["P-1"]).json
        key = uuid.uuid4().hex
        first = {}

        def confirm():
            c = self.S.client(timeout=30)
            try:
                first["r"] = c.post(f"/v1/holds/{h['hold_id']}/confirm",
                                    payment(h["amount"], "tok_sim_delay_1000"), token=tok,
                                    headers={"Idempotency-Key": key})
            except Exception as e:  # noqa: BLE001
                first["r"] = e
            finally:
                c.close()
        t = threading.Thread(target=confirm)
        t.start()
        time.sleep(0.4)  # the charge is in flight at the simulator
        self.pg("-m", "immediate", "-w", "-t", "30", "stop")
        try:
            t.join(30)
            r = first.get("r")
            self.assertIsInstance(r, stack.Response, repr(r))
            self.assertStatus(r, 503, "unavailable")
            self.assertTrue(r.header("Retry-After"), repr(r.headers))
            # While Postgres is down, a retry fails cleanly too.
            again = self.confirm_src(h, tok, "tok_sim_delay_1000", key=key)
            self.assertStatus(again, 503, "unavailable")
        finally:
            self.pg("-w", "-t", "60", "-l", os.path.join(self.S.state, "log", "postgres.log"),
                    "start")

        def retry():
            c = self.S.client(timeout=30)
            try:
                r = c.post(f"/v1/holds/{h['hold_id']}/confirm",
                           payment(h["amount"], "tok_sim_delay_1000"), token=tok,
                           headers={"Idempotency-Key": key})
            finally:
                c.close()
            return r if r.status in (200, 201) else None
        done = wait_for(retry, 60, interval=0.5, what="the retry with the same key completes")
        self.assertEqual(done.json["state"], "confirmed", repr(done))
        self.assertEqual(self.audit_event(ev), {done.json["checkout_id"]: "charged+booked"})
        self.assertEqual(len(self.pay.ledger(ev)["charges"]), 1)
