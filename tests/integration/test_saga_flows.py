"""Checkout saga (docs/design.md invariants 6-8): every branch driven from the payment
simulator — success, decline, payment slower than the hold (refund + 409 hold_expired),
provider timeout (202, then the reconciler resolves it both ways) — and double submit.

The reserve runs with short payment deadlines and an eager reconciler (saga_env()); the
simulator's per-request sources pick the branch (loadgen/paysim/ps_core.h), so tests do
not depend on its global settings.

Also the shared helpers of the other test_saga_* modules.
"""

import json
import os
import ssl
import time
import uuid
import http.client

import stack
from stack import summarize, wait_for

# Stack.env as stack.py defines it, before any module of this process could change it.
_STACK_ENV = stack.Stack.env

PAY_TIMEOUT_MS = 1500   # reserve's provider deadline
PAYSIM_LATE_MS = 2500   # simulator: a "late"/"lost" answer comes after this
LEASE_S = 8             # checkout lease (must exceed twice the provider deadline by 5 s)
TERMINAL = {"confirmed", "failed", "released", "refunded"}


def saga_env(s):
    """Reserve and simulator settings for saga tests, on top of the stack's."""
    return {
        "ONSALE_RESERVE_PAYSIM_URL": f"https://127.0.0.1:{s.paysim_port}",
        "ONSALE_RESERVE_PAYSIM_CA": os.path.join(s.state, "ca.pem"),
        "ONSALE_RESERVE_PAY_TIMEOUT_MS": str(PAY_TIMEOUT_MS),
        "ONSALE_RESERVE_PAY_CONNECT_TIMEOUT_MS": "500",
        "ONSALE_RESERVE_CHECKOUT_LEASE_S": str(LEASE_S),
        "ONSALE_RESERVE_RECONCILE_AFTER_S": "1",
        "ONSALE_RESERVE_RECONCILE_INTERVAL_MS": "200",
        "ONSALE_PAYSIM_LEDGER_FILE": os.path.join(s.state, "paysim-ledger.jsonl"),
        "ONSALE_PAYSIM_TIMEOUT_MS": str(PAYSIM_LATE_MS),
        "ONSALE_PAYSIM_LATENCY_MIN_MS": "5",
        "ONSALE_PAYSIM_LATENCY_MAX_MS": "30",
    }


class SagaStack(stack.Stack):
    """A stack whose services all run with saga_env() (until deploy/onsale wires
    paysim_url/paysim_ca itself, the environment carries them). A subclass, so the saga
    settings go with this stack — its restarts included — and never into stack.Stack, which
    every later module of the same process uses."""

    def env(self):
        e = super().env()
        e.update(saga_env(self))
        return e


def saga_stack(name):
    """stack.module_stack for a SagaStack: started for the calling module (call from
    setUpModule), or the process's equally configured one when sharing."""
    return stack.module_stack(s=SagaStack(name))


class Paysim:
    """The simulator's API over HTTPS with the stack's CA."""

    def __init__(self, s):
        self.s = s

    def request(self, method, path, body=None, headers=None):
        ctx = ssl.create_default_context(cafile=os.path.join(self.s.state, "ca.pem"))
        c = http.client.HTTPSConnection("127.0.0.1", self.s.paysim_port, context=ctx, timeout=10)
        try:
            h = {"Content-Type": "application/json"}
            h.update(headers or {})
            c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
            r = c.getresponse()
            data = r.read()
            return r.status, (json.loads(data) if data else None)
        finally:
            c.close()

    def ledger(self, event):
        """The simulator's ledger for event: "intents" (every PaymentIntent, its latest
        charge expanded), "charges" (the intents a confirmation charged or tried to, each
        with "checkout" = metadata.checkout and "paid"), "refunds" (each names its
        payment_intent)."""
        st, doc = self.request("GET", f"/v1/ledger?event={event}")
        assert st == 200, (st, doc)
        charges = []
        for pi in doc["payment_intents"]:
            if isinstance(pi.get("latest_charge"), dict):
                charges.append(dict(pi, checkout=pi["metadata"].get("checkout"),
                                    paid=pi["status"] == "succeeded",
                                    refunded=pi["latest_charge"]["amount_refunded"] > 0))
        return {"intents": doc["payment_intents"], "charges": charges,
                "refunds": doc["refunds"], "processing": doc["processing"]}

    def intent_of(self, checkout_id):
        """The PaymentIntent of a checkout (GET /v1/payment_intents, newest first)."""
        st, doc = self.request("GET", "/v1/payment_intents?limit=100")
        assert st == 200, (st, doc)
        return next((pi for pi in doc["data"]
                     if pi["metadata"].get("checkout") == checkout_id), None)

    def settings(self, **kw):
        st, doc = self.request("PATCH", "/v1/settings", kw)
        assert st == 200, (st, doc)
        return doc


def payment(amount, source="tok_visa"):
    return {"payment": {"amount": amount, "currency": "EUR", "source": source}}


class SagaCase(stack.ReserveTestCase):
    @property
    def pay(self):
        return Paysim(self.S)

    def confirm_src(self, hold, token, source, key=None, client=None):
        key = key or uuid.uuid4().hex
        c = client or self.c
        return c.post(f"/v1/holds/{hold['hold_id']}/confirm", payment(hold["amount"], source),
                      token=token, headers={"Idempotency-Key": key})

    def checkout_state(self, cid):
        return self.S.sql_value(f"select state from checkouts where checkout_id = '{cid}'")

    def wait_terminal(self, cids, timeout=60):
        ids = ",".join(f"'{c}'" for c in cids)

        def done():
            rows = self.S.sql(f"select checkout_id, state from checkouts "
                              f"where checkout_id in ({ids})")
            return len(rows) == len(cids) and all(r[1] in TERMINAL for r in rows) and rows
        return dict(wait_for(done, timeout, interval=0.25, what=f"checkouts {cids} terminal"))

    def transitions(self, cid):
        return [tuple(r) for r in self.S.sql(
            f"select coalesce(from_state,''), to_state from checkout_transitions "
            f"where checkout_id = '{cid}' order by id")]

    def commits(self, cid):
        """The checkout's transitions grouped by the Postgres transaction that wrote them
        (rows of one transaction share their xmin), in order."""
        groups = []
        last = None
        for xid, frm, to in self.S.sql(
                f"select xmin::text, coalesce(from_state,''), to_state from checkout_transitions "
                f"where checkout_id = '{cid}' order by id"):
            if xid != last:
                groups.append([])
                last = xid
            groups[-1].append((frm, to))
        return groups

    def audit_event(self, ev):
        """Every checkout of ev against Postgres and the simulator's ledger: terminal, and
        exactly one of {one charge, one booking} / {charge refunded, no booking} /
        {no charge, no booking}. Returns {checkout_id: outcome}."""
        led = self.pay.ledger(ev)
        charges = {}
        for ch in led["charges"]:
            charges.setdefault(ch["checkout"], []).append(ch)
        refunds = {}
        for rf in led["refunds"]:
            refunds.setdefault(rf["payment_intent"], []).append(rf)
        rows = self.S.sql(f"select c.checkout_id, c.state, coalesce(c.charge_id,''), "
                          f"(select count(*) from bookings b where b.checkout_id = c.checkout_id), "
                          f"coalesce(c.refund_id,'') "
                          f"from checkouts c where c.event_id = '{ev}'")
        out = {}
        for cid, state, charge_id, nbook, refund_id in rows:
            nbook = int(nbook)
            self.assertIn(state, TERMINAL, f"checkout {cid} not terminal: {state}")
            chs = charges.get(cid, [])
            self.assertLessEqual(len(chs), 1, f"{cid}: more than one charge record {chs}")
            ok = [c for c in chs if c["status"] == "succeeded"]
            rfs = refunds.get(ok[0]["id"], []) if ok else []
            self.assertLessEqual(len(rfs), 1, f"{cid}: double refund {rfs}")
            if ok and not rfs:
                outcome = "charged+booked"
                self.assertEqual((nbook, state), (1, "confirmed"), f"{cid}: paid, not booked")
                self.assertEqual(charge_id, ok[0]["id"], cid)
            elif ok and rfs:
                outcome = "refunded"
                self.assertEqual((nbook, state), (0, "refunded"), f"{cid}: refunded, booked?")
                # The whole charge went back, and the checkout names that charge and refund.
                rf = rfs[0]
                self.assertEqual(rf["status"], "succeeded", f"{cid}: {rf}")
                self.assertEqual((rf["amount"], rf["currency"]),
                                 (ok[0]["amount"], ok[0]["currency"]), f"{cid}: partial refund")
                self.assertEqual((charge_id, refund_id), (ok[0]["id"], rf["id"]), cid)
            else:
                outcome = "nothing"
                self.assertEqual(nbook, 0, f"{cid}: booked without a charge")
                self.assertIn(state, ("failed", "released"), cid)
            out[cid] = outcome
        return out


def setUpModule():
    saga_stack("saga")


SEATS = [{"id": f"A-{i}", "section": "A", "price": 12000} for i in range(1, 21)]


class Branches(SagaCase):
    def test_success_books_and_charges_once(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        t = self.S.token(ev, "payer")
        h = self.hold(ev, t, seats=["A-1"]).json
        r = self.confirm_src(h, t, "tok_visa")
        self.assertStatus(r, 201)
        cid = r.json["checkout_id"]
        self.assertEqual(r.json["state"], "confirmed")
        self.assertEqual(self.transitions(cid), [
            ("", "created"), ("created", "hold_extended"),
            ("hold_extended", "payment_requested"), ("payment_requested", "paid"),
            ("paid", "converted"), ("converted", "confirmed")])
        # Two commits (docs/confirm.md): the start after the hold's extend; the charge
        # recorded with the booking (merge (b)).
        self.assertEqual(self.commits(cid), [
            [("", "created"), ("created", "hold_extended"),
             ("hold_extended", "payment_requested")],
            [("payment_requested", "paid"), ("paid", "converted"),
             ("converted", "confirmed")]])
        g = self.c.get(f"/v1/checkouts/{cid}", token=t)
        self.assertStatus(g, 200)
        self.assertEqual(g.json["state"], "confirmed")
        self.assertEqual(self.audit_event(ev), {cid: "charged+booked"})

    def test_a_hold_refused_at_start_fails_in_one_commit_and_replays(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        t = self.S.token(ev, "wrongamount")
        h = self.hold(ev, t, seats=["A-8"]).json
        key = uuid.uuid4().hex
        body = {"payment": {"amount": h["amount"] + 1, "currency": "EUR", "source": "tok_visa"}}
        r = self.c.post(f"/v1/holds/{h['hold_id']}/confirm", body, token=t,
                        headers={"Idempotency-Key": key})
        self.assertStatus(r, 400, "amount_mismatch")
        cid = r.json["checkout_id"]
        self.assertEqual(self.commits(cid), [[("", "created"), ("created", "failed")]])
        self.assertIsNone(self.S.sql_value(
            f"select lease_until from checkouts where checkout_id = '{cid}'"))
        again = self.c.post(f"/v1/holds/{h['hold_id']}/confirm", body, token=t,
                            headers={"Idempotency-Key": key})
        self.assertStatus(again, 400, "amount_mismatch")
        self.assertEqual(again.json, r.json)
        self.assertEqual(again.header("Idempotent-Replayed"), "true")
        self.assertEqual(self.pay.ledger(ev)["charges"], [])
        # The hold is still the buyer's, and the right amount confirms it.
        ok = self.confirm_src(h, t, "tok_visa")
        self.assertStatus(ok, 201)

    def test_decline_answers_402_and_the_hold_stays(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        t = self.S.token(ev, "declined")
        h = self.hold(ev, t, seats=["A-2"]).json
        r = self.confirm_src(h, t, "tok_chargeDeclined")
        self.assertStatus(r, 402, "payment_declined")
        g = self.c.get(f"/v1/holds/{h['hold_id']}", token=t)
        self.assertStatus(g, 200, msg="the hold stays after a decline:")
        self.assertEqual(self.checkout_state(r.json["checkout_id"]), "failed")
        # Another card on the same hold works.
        r2 = self.confirm_src(h, t, "tok_visa")
        self.assertStatus(r2, 201)
        self.assertEqual(sorted(self.audit_event(ev).values()), ["charged+booked", "nothing"])

    def test_payment_slower_than_the_hold_is_refunded(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4, hold_ttl_seconds=1,
                            checkout_extension_seconds=0, max_hold_seconds=1)
        t, t2 = self.S.token(ev, "slowpay"), self.S.token(ev, "other")
        h = self.hold(ev, t, seats=["A-3"]).json
        key = uuid.uuid4().hex
        r = self.confirm_src(h, t, "tok_sim_delay_1300", key=key)
        self.assertStatus(r, 409, "hold_expired")
        self.assertEqual(r.json["refund"]["status"], "refunded", repr(r))
        self.assertTrue(r.json["refund"]["id"].startswith("re_"), repr(r))
        cid = r.json["checkout_id"]
        self.assertEqual(self.checkout_state(cid), "refunded")
        # convert.lua answered EXPIRED: the charge and refunding in one commit (merge (b),
        # docs/confirm.md), then the refund's.
        self.assertEqual(self.commits(cid)[1:], [
            [("payment_requested", "paid"), ("paid", "refunding")],
            [("refunding", "refunded")]])
        self.assertEqual(self.S.sql_value(
            f"select count(*) from bookings where event_id = '{ev}'"), "0")
        # The seat is free for others.
        self.hold(ev, t2, seats=["A-3"])
        self.assertEqual(self.audit_event(ev), {cid: "refunded"})
        # A replay of the same key answers the same refund: the stored answer, no second
        # checkout, charge or refund.
        again = self.confirm_src(h, t, "tok_sim_delay_1300", key=key)
        self.assertStatus(again, 409, "hold_expired")
        self.assertEqual(again.header("Idempotent-Replayed"), "true")
        self.assertEqual(again.json, r.json)
        self.assertEqual((again.json["refund"]["id"], again.json["refund"]["amount"]),
                         (r.json["refund"]["id"], h["amount"]))
        led = self.pay.ledger(ev)
        self.assertEqual([(x["id"], x["amount"]) for x in led["refunds"]],
                         [(r.json["refund"]["id"], h["amount"])], led)
        self.assertEqual(len(led["charges"]), 1, led)
        self.assertEqual(self.audit_event(ev), {cid: "refunded"})

    def test_timeout_charge_happened_then_reconciler_books(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        t = self.S.token(ev, "late")
        h = self.hold(ev, t, seats=["A-4"]).json
        r = self.confirm_src(h, t, "tok_sim_late")
        self.assertStatus(r, 202)
        self.assertEqual(r.json["state"], "pending")
        cid = r.json["checkout_id"]
        self.assertEqual(self.wait_terminal([cid])[cid], "confirmed")
        self.assertEqual(self.audit_event(ev), {cid: "charged+booked"})
        self.assertIn(("unknown", "paid"), self.transitions(cid))

    def test_timeout_charge_happened_hold_gone_then_refunded(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4, hold_ttl_seconds=1,
                            checkout_extension_seconds=0, max_hold_seconds=1)
        t = self.S.token(ev, "late2")
        h = self.hold(ev, t, seats=["A-5"]).json
        r = self.confirm_src(h, t, "tok_sim_late")
        self.assertStatus(r, 202)
        cid = r.json["checkout_id"]
        self.assertEqual(self.wait_terminal([cid])[cid], "refunded")
        self.assertEqual(self.audit_event(ev), {cid: "refunded"})

    def test_timeout_no_charge_then_released(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        t = self.S.token(ev, "lost")
        h = self.hold(ev, t, seats=["A-6"]).json
        r = self.confirm_src(h, t, "tok_sim_lost")
        self.assertStatus(r, 202)
        cid = r.json["checkout_id"]
        self.assertEqual(self.wait_terminal([cid])[cid], "released")
        self.assertEqual(self.audit_event(ev), {cid: "nothing"})
        g = self.c.get(f"/v1/checkouts/{cid}", token=t)
        self.assertEqual(g.json["state"], "released", repr(g))

    def test_saga_stack_leaves_stack_env_alone(self):
        """The saga settings are the saga stack's own: stack.Stack (every other module's
        stacks) is as stack.py defines it, while this stack's env() carries them."""
        self.assertIs(stack.Stack.env, _STACK_ENV)
        self.assertIsInstance(self.S, SagaStack)
        e = self.S.env()
        for k, v in saga_env(self.S).items():
            self.assertEqual(e.get(k), v, k)

    def test_admin_lists_stuck_checkouts_and_metrics(self):
        r = self.S.admin("GET", "/admin/checkouts?state=unknown&older_than_seconds=60")
        self.assertStatus(r, 200)
        self.assertIn("count", r.json)
        m = self.S.metrics()
        for name in ("onsale_reserve_checkout_transitions_total", "onsale_reserve_refunds_total",
                     "onsale_reserve_payment_seconds_count", "onsale_reserve_checkouts",
                     "onsale_reserve_reconciler_actions_total"):
            self.assertIn(name, m, name)


class DoubleSubmit(SagaCase):
    def test_same_confirm_10x_concurrently_then_replay_one_charge_one_booking(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        t = self.S.token(ev, "clicker")
        h = self.hold(ev, t, seats=["A-7"]).json
        key = uuid.uuid4().hex
        req = self.S.req("POST", f"/v1/holds/{h['hold_id']}/confirm", token=t,
                         body=payment(h["amount"], "tok_sim_delay_300"),
                         headers={"Idempotency-Key": key})
        res = self.S.burst([req] * 10)
        summary = summarize(res)
        self.assertEqual(sum(r.status == 201 for r in res), 1, summary)
        self.assertTrue(all(r.status == 201 or (r.status == 409 and r.err == "in_progress")
                            for r in res), summary)
        first = next(r for r in res if r.status == 201)
        again = self.c.post(f"/v1/holds/{h['hold_id']}/confirm",
                            payment(h["amount"], "tok_sim_delay_300"), token=t,
                            headers={"Idempotency-Key": key})
        self.assertStatus(again, 200)
        self.assertEqual(again.json, first.json)
        led = self.pay.ledger(ev)
        self.assertEqual(len(led["charges"]), 1, led)
        self.assertEqual(self.S.sql_value(
            f"select count(*) from bookings where event_id = '{ev}'"), "1")
        self.assertEqual(self.audit_event(ev), {first.json["checkout_id"]: "charged+booked"})


class RowWrites(SagaCase):
    """What one confirmation writes (migration 006, docs/confirm.md): the checkout row once
    per commit — inserted in payment_requested, one UPDATE to paid, one to confirmed — and
    the full audit trail, six transition rows with their reasons. Counted by Postgres
    itself (pg_stat_xact_user_tables, inside the transaction that calls each function)."""

    HASH = "ab" * 32

    def writes(self, call):
        """Runs call in one transaction; its row counts: (checkouts inserted, checkouts
        updated, transitions inserted)."""
        rows = self.S.sql(
            f"{call}; select 'W', "
            "coalesce(sum(n_tup_ins) filter (where relname = 'checkouts'), 0), "
            "coalesce(sum(n_tup_upd) filter (where relname = 'checkouts'), 0), "
            "coalesce(sum(n_tup_ins) filter (where relname = 'checkout_transitions'), 0) "
            "from pg_stat_xact_user_tables")
        return tuple(int(x) for x in next(r for r in rows if r[0] == "W")[1:])

    def start(self, ev, cid, buyer, key, to, reason="NULL", code="NULL", body="NULL"):
        return (f"select outcome, state from onsale_saga_start('{cid}', '{ev}', '{buyer}', "
                f"'{key}', '{self.HASH}', 'hold-{cid}', 12000, 'EUR', 30, 'tok_visa', {to}, "
                f"{reason}, {code}::int, {body})")

    def trail(self, cid):
        return [tuple(r) for r in self.S.sql(
            f"select coalesce(from_state,''), to_state, reason from checkout_transitions "
            f"where checkout_id = '{cid}' order by id")]

    def test_a_confirmation_writes_the_checkout_once_per_commit(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        cid = "co_rows_" + uuid.uuid4().hex[:12]
        self.assertEqual(self.writes(self.start(ev, cid, "rw1", "k1", "'payment_requested'")),
                         (1, 0, 3))
        self.assertEqual(self.S.sql(f"select state, payment_source, lease_until > now() "
                                    f"from checkouts where checkout_id = '{cid}'"),
                         [["payment_requested", "tok_visa", "t"]])
        # The charge and the booking: one UPDATE, three transitions (merge (b)).
        self.assertEqual(self.writes(
            f"select outcome from onsale_saga_book('{cid}', 'bk_{cid}', NULL, "
            f"'{{A-20}}'::text[], '{{}}', 3, 'ch_{cid}')"), (0, 1, 3))
        self.assertEqual(self.S.sql(f"select state, booking_id, charge_id, response_code, "
                                    f"lease_until is null from checkouts "
                                    f"where checkout_id = '{cid}'"),
                         [["confirmed", f"bk_{cid}", f"ch_{cid}", "201", "t"]])
        # The same trail, reasons included, as when every hop was its own UPDATE.
        self.assertEqual(self.trail(cid), [
            ("", "created", "confirm requested"),
            ("created", "hold_extended", "hold extended at checkout start"),
            ("hold_extended", "payment_requested", "payment requested"),
            ("payment_requested", "paid", "the provider confirmed the charge"),
            ("paid", "converted", "hold re-checked in Redis; booking inserted"),
            ("converted", "confirmed", "booking confirmed")])

    def test_a_charge_whose_hold_expired_is_recorded_with_its_refund_in_one_write(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        cid = "co_rows_" + uuid.uuid4().hex[:12]
        self.writes(self.start(ev, cid, "rw5", "k5", "'payment_requested'"))
        self.assertEqual(self.writes(
            f"select applied, state, refund_reason from onsale_saga_paid_refund('{cid}', "
            f"'ch_{cid}', 'hold_expired', 'paid, but the hold had expired at conversion: "
            f"refund', 30)"), (0, 1, 2))
        self.assertEqual(self.S.sql(f"select state, charge_id, refund_reason, lease_until > now() "
                                    f"from checkouts where checkout_id = '{cid}'"),
                         [["refunding", f"ch_{cid}", "hold_expired", "t"]])
        self.assertEqual(self.trail(cid)[3:], [
            ("payment_requested", "paid", "the provider confirmed the charge"),
            ("paid", "refunding", "paid, but the hold had expired at conversion: refund")])
        # Done already: nothing written, the caller told where it is.
        self.assertEqual(self.S.sql(
            f"select applied, state from onsale_saga_paid_refund('{cid}', 'ch_{cid}', "
            f"'hold_expired', 'again', 30)"), [["f", "refunding"]])

    def test_a_charge_for_an_ended_checkout_is_a_late_charge_at_either_step(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        for i, call in enumerate([
                "select outcome, refund_reason from onsale_saga_book('{cid}', 'bk_{cid}', NULL, "
                "'{{A-19}}'::text[], '{{}}', 3, 'ch_{cid}')",
                "select state, refund_reason from onsale_saga_paid_refund('{cid}', 'ch_{cid}', "
                "'hold_expired', 'x', 30)"]):
            cid = "co_rows_" + uuid.uuid4().hex[:12]
            self.writes(self.start(ev, cid, f"rw6{i}", "k6", "'payment_requested'"))
            self.S.sql(f"select onsale_saga_step('{cid}', '{{payment_requested}}'::text[], "
                       "'released', 'none at the provider', NULL, NULL, NULL, NULL::int, NULL, "
                       "NULL)")
            self.assertEqual(self.S.sql(call.format(cid=cid)), [["refunding", "late_charge"]])
            self.assertEqual(self.S.sql(f"select state, charge_id, refund_reason, booking_id "
                                        f"is null from checkouts where checkout_id = '{cid}'"),
                             [["refunding", f"ch_{cid}", "late_charge", "t"]])
            tr = self.trail(cid)
            self.assertEqual(tr[-1][:2], ("released", "refunding"), tr)
            self.assertIn(f"ch_{cid}", tr[-1][2])
        self.assertEqual(self.S.sql_value(
            f"select count(*) from bookings where event_id = '{ev}'"), "0")

    def test_a_refused_start_and_a_replay_write_what_they_say(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        cid = "co_rows_" + uuid.uuid4().hex[:12]
        self.assertEqual(self.writes(self.start(
            ev, cid, "rw2", "k2", "'failed'", "'the hold''s amount differs'", "400",
            "'{\"error\":\"amount_mismatch\"}'")), (1, 0, 2))
        self.assertEqual(self.trail(cid), [("", "created", "confirm requested"),
                                           ("created", "failed", "the hold's amount differs")])
        self.assertEqual(self.S.sql(f"select state, response_code, lease_until is null "
                                    f"from checkouts where checkout_id = '{cid}'"),
                         [["failed", "400", "t"]])
        # A replay names a path for a row it does not insert: nothing is written, and the
        # path does not leak into the next transition of the same transaction.
        other = "co_rows_" + uuid.uuid4().hex[:12]
        self.assertEqual(self.writes(self.start(ev, other, "rw2", "k2", "'payment_requested'")),
                         (0, 0, 0))
        cid3 = "co_rows_" + uuid.uuid4().hex[:12]
        self.assertEqual(self.writes(
            self.start(ev, cid3, "rw3", "k3", "NULL") + "; "
            + self.start(ev, cid3 + "x", "rw3", "k3", "'payment_requested'") + "; "
            + f"select onsale_saga_step('{cid3}', '{{created}}'::text[], 'released', "
              "'abandoned', NULL, NULL, NULL, NULL::int, NULL, NULL)"), (1, 1, 2))
        self.assertEqual(self.trail(cid3), [("", "created", "confirm requested"),
                                            ("created", "released", "abandoned")])

    def test_a_checkout_is_never_deleted(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        cid = "co_rows_" + uuid.uuid4().hex[:12]
        self.writes(self.start(ev, cid, "rw4", "k4", "NULL"))
        with self.assertRaisesRegex(AssertionError, "never deleted"):
            self.S.sql(f"delete from checkouts where checkout_id = '{cid}'")
        self.assertEqual(self.S.sql_value(
            f"select count(*) from checkouts where checkout_id = '{cid}'"), "1")
