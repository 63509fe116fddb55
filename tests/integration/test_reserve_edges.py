"""The money and consistency edges of the reserve (real Redis, Postgres and simulator).

- checkout_lease_s shorter than 2 x pay_timeout_ms + 5 s (a charge is two provider calls):
  the reserve refuses to start
  (regression: lease_lapsing_mid_charge — the reconciler could take a checkout while its
  charge was still out).
- After a sold_out refusal (a stale Redis counter handed out pool units past the
  capacity), only units Postgres has go back to the counter (regression:
  unconvert_returned_units_postgres_never_had — later buyers were charged and refunded).
- The event's currency cannot change while holds or open checkouts live: 409
  currency_in_use (regression: currency_changed_under_live_holds).
- A charge whose checkout is still open past ledger_settle_s is checked again until the
  checkout settles (regression: ledger_dropped_open_charge_past_settle — the cursor had
  moved past it, so money of a checkout that then ended unpaid was never refunded).
"""

import subprocess
import time

import stack
from stack import metric_sum, wait_for
from test_saga_flows import PAY_TIMEOUT_MS, SagaCase, saga_env

LEDGER_INTERVAL_MS = 300
SLOW_MS = PAY_TIMEOUT_MS + 1000  # a charge answered after the reserve's deadline: 202


def setUpModule():
    orig = stack.Stack.env

    def env(self):
        e = orig(self)
        e.update(saga_env(self))
        e.update({
            "ONSALE_RESERVE_LEDGER_INTERVAL_MS": str(LEDGER_INTERVAL_MS),
            "ONSALE_RESERVE_LEDGER_SETTLE_S": "0",
            # nothing but these tests finishes a pending checkout
            "ONSALE_RESERVE_RECONCILE_AFTER_S": "3600",
        })
        return e

    stack.Stack.env = env
    try:
        stack.module_stack("edges")
    finally:
        stack.Stack.env = orig


SEATS = [{"id": f"A-{i}", "section": "A", "price": 1000} for i in range(1, 9)]


class ConfigRefusal(stack.ReserveTestCase):
    def test_lease_shorter_than_pay_timeout_refuses_to_start(self):
        p = subprocess.run(
            [self.S.reserve_bin, "--checkout_lease_s=5", "--pay_timeout_ms=10000",
             "--pg_conninfo=host=127.0.0.1 port=1 dbname=none connect_timeout=1"],
            capture_output=True, stdin=subprocess.DEVNULL, timeout=30)
        err = p.stderr.decode()
        self.assertEqual(p.returncode, 2, f"exit {p.returncode}: {err}")
        self.assertIn("checkout_lease_s (5 s) must be at least 2 x pay_timeout_ms + 5000 ms", err)


class SoldOutGiveBack(SagaCase):
    def test_sold_out_gives_back_only_units_postgres_has(self):
        ev = self.new_event(pools=[{"id": "floor", "capacity": 2, "price": 500}],
                            max_per_buyer=4)
        t1, t2, t3 = (self.S.token(ev, b) for b in ("first", "stale", "later"))
        h = self.hold(ev, t1, pool="floor", quantity=2).json
        self.assertStatus(self.confirm(h["hold_id"], t1, h["amount"]), 201)
        # A stale restore: the counter says 2 free, the unit numbers go on from 2, so the
        # next hold gets floor#3 and floor#4, which Postgres never had.
        counter = "os:{%s}:p:floor" % ev
        self.assertEqual(self.S.redis("SET", counter, "2"), "OK")
        h2 = self.hold(ev, t2, pool="floor", quantity=2).json
        r = self.confirm(h2["hold_id"], t2, h2["amount"])
        self.assertStatus(r, 409, "sold_out")
        self.assertEqual(self.S.sql_value(
            f"select state from checkouts where event_id = '{ev}' and buyer = 'stale'"),
            "refunded")
        self.assertEqual(self.S.redis("GET", counter), b"0",
                         "no unit of the refused hold goes back: Postgres has none free")
        r = self.c.post(f"/v1/events/{ev}/holds", {"pool": "floor", "quantity": 1}, token=t3)
        self.assertStatus(r, 409, "sold_out", msg="a later buyer:")


class CurrencyChange(SagaCase):
    def put(self, ev, **spec):
        return self.S.admin("PUT", f"/admin/events/{ev}", {"seats": SEATS, **spec})

    def test_currency_waits_for_live_holds(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=2)
        t = self.S.token(ev, "holder")
        h = self.hold(ev, t, seats=["A-1"]).json
        self.assertStatus(self.put(ev, currency="USD", max_per_buyer=2), 409, "currency_in_use")
        self.assertStatus(self.put(ev, currency="EUR", max_per_buyer=3), 200,
                          msg="settings other than the currency still change:")
        self.assertEqual(self.c.delete(f"/v1/holds/{h['hold_id']}", token=t).status, 204)
        r = self.put(ev, currency="USD", max_per_buyer=3)
        self.assertStatus(r, 200, msg="no hold lives:")
        self.assertEqual(r.json.get("currency"), "USD", repr(r))

    def test_currency_waits_for_open_checkouts(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=2)
        t = self.S.token(ev, "slow-payer")
        h = self.hold(ev, t, seats=["A-2"]).json
        r = self.confirm_src(h, t, f"tok_sim_delay_{SLOW_MS}")
        self.assertStatus(r, 202)
        # the hold is spent: only the open checkout stands in the way
        self.S.redis("DEL", "os:{%s}:active" % ev)
        self.assertStatus(self.put(ev, currency="USD"), 409, "currency_in_use")
        self.S.sql(f"update checkouts set state = 'failed', lease_until = null "
                   f"where event_id = '{ev}'")
        self.assertStatus(self.put(ev, currency="USD"), 200, msg="every checkout ended:")


class LedgerOpenPastSettle(SagaCase):
    def test_open_charge_past_settle_is_refunded_when_its_checkout_ends_unpaid(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=2)
        t = self.S.token(ev, "ledger-late")
        h = self.hold(ev, t, seats=["A-3"]).json
        r = self.confirm_src(h, t, f"tok_sim_delay_{SLOW_MS}")
        self.assertStatus(r, 202)
        cid = r.json["checkout_id"]

        def landed():
            return next((c for c in self.pay.ledger(ev)["charges"]
                         if c.get("checkout") == cid and c.get("paid")), None)
        charge = wait_for(landed, 20, interval=0.1, what="the charge landed at the provider")
        # Scans read it while its checkout is open; ledger_settle_s = 0, so it is past the
        # settle time once its second is over. A few scans more, then the checkout ends
        # unpaid without its saga seeing the charge.
        since = time.time()
        scans = metric_sum(self.S.metrics(), "onsale_reserve_ledger_scans_total")
        wait_for(lambda: time.time() > since + 1.1 and metric_sum(
            self.S.metrics(), "onsale_reserve_ledger_scans_total") >= scans + 4, 20,
            interval=0.1, what="ledger scans past the settle time")
        self.assertNotIn(self.checkout_state(cid), ("refunding", "refunded"))
        self.S.sql(f"update checkouts set state = 'released', lease_until = null "
                   f"where checkout_id = '{cid}'")
        wait_for(lambda: self.checkout_state(cid) in ("refunding", "refunded"), 20,
                 interval=0.2, what=f"the ledger takes checkout {cid} back to refunding "
                                    f"(now {self.checkout_state(cid)})")
        why = self.S.sql_value(f"select reason from checkout_transitions where checkout_id = "
                               f"'{cid}' and to_state = 'refunding' order by id desc limit 1")
        self.assertIn(charge.get("id", ""), why or "", "the audit names the charge")
