"""Events out (docs/api.md, "Events out"; reserve/rsv_outbox.c): every change announced is
written to the outbox in its own transaction and delivered to the operator's receiver —
signed (verified by docs/examples/webhook-receiver.py, the receiver here), at least once,
in order per key, retried with back-off when the receiver is down, answers 500 or hangs,
and all of it delivered after the delivering reserve is SIGKILLed mid-delivery.

The stack's own reserve has no events_url (its rows wait, as they would for an operator who
has not configured one); a second reserve started here on the same database delivers them
to a receiver in this process, whose answers the tests steer.
"""

import importlib.util
import json
import os
import signal
import socket
import threading
import time
import uuid

import stack
from stack import metric_sum, wait_for
from test_saga_crash import Reserves
from test_saga_flows import SagaCase, SagaStack

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "webhook_receiver", os.path.join(HERE, "..", "..", "docs", "examples", "webhook-receiver.py"))
webhook_receiver = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(webhook_receiver)

SECRET = b"events-secret-" + uuid.uuid4().hex.encode()
OLD_SECRET = b"events-old-secret-0123456789"
NEW_SECRET = b"events-new-secret-" + uuid.uuid4().hex.encode()
TIMEOUT_MS = 1500   # the deliverer's deadline; a "slow" receiver answers after it
RETRY_BASE_MS = 200
RETRY_MAX_MS = 1500
ARRIVE_MS = 5000    # a late charge (test_saga_money): lands after the checkout's release


class EventsStack(SagaStack):
    """The saga stack with the provider-ledger check eager enough to refund a late
    charge within a test (test_saga_money's settings)."""

    def env(self):
        e = super().env()
        e.update({
            "ONSALE_RESERVE_LEDGER_INTERVAL_MS": "500",
            "ONSALE_RESERVE_LEDGER_SETTLE_S": "5",
        })
        return e


class Steered(webhook_receiver.Receiver):
    """The example receiver, its answers steered by the test: `mode` ok / fail (500) /
    slow (answers after the deliverer's deadline); every request that verified is logged
    with its answer."""

    def __init__(self, address):
        super().__init__(address, [OLD_SECRET, SECRET], tolerance=300, on_event=lambda ev: None)
        self.mode = "ok"
        self.fail_first = False  # 500 to the first try of every event id
        self.log = []            # (event, status) of every verified request, in order
        self.tried = set()
        self.conns = []          # every accepted connection, to cut them when stopped
        self.signed = {}         # event id -> (Onsale-Signature, raw body) of its last try

    def get_request(self):
        sock, addr = super().get_request()
        with self.lock:
            self.conns.append(sock)
        return sock, addr

    def cut(self):
        with self.lock:
            for sock in self.conns:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def take(self, event, request=None):
        mode = self.mode
        with self.lock:
            first = event["id"] not in self.tried
            self.tried.add(event["id"])
        if mode == "slow":
            time.sleep(TIMEOUT_MS / 1000 + 1)
        status = 500 if mode == "fail" or (self.fail_first and first) else 200
        with self.lock:
            self.log.append((event, status))
            self.signed[event["id"]] = (request.headers["Onsale-Signature"], request.raw_body)
        return status

    def delivered(self):
        """Events answered 2xx, each once, in the order of their first 2xx."""
        out, seen = [], set()
        with self.lock:
            for ev, st in self.log:
                if st == 200 and ev["id"] not in seen:
                    seen.add(ev["id"])
                    out.append(ev)
        return out


class Box:
    receiver = None
    port = None
    thread = None
    reserves = None
    deliverer = None


def start_receiver():
    if Box.port is None:
        Box.port = stack._free_ports(1)[0]
    Box.receiver = Steered(("127.0.0.1", Box.port))
    Box.thread = threading.Thread(target=Box.receiver.serve_forever, daemon=True)
    Box.thread.start()


def stop_receiver():
    """Closes the listening socket and every kept-alive connection: the deliverer's
    connections are refused."""
    Box.receiver.shutdown()
    Box.receiver.server_close()
    Box.receiver.cut()


def secret_file(s):
    return os.path.join(s.root, "events-secret")


def write_secrets(s, text):
    """(Re)writes the deliverer's secret file, owner-only."""
    fd = os.open(secret_file(s), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(text)


def deliverer_env(s):
    if not os.path.exists(secret_file(s)):
        write_secrets(s, SECRET + b"\n" + OLD_SECRET + b"\n")
    return {
        "ONSALE_RESERVE_EVENTS_URL": f"http://127.0.0.1:{Box.port}/onsale/events",
        "ONSALE_RESERVE_ALLOW_LOOPBACK_HTTP": "true",
        "ONSALE_RESERVE_EVENTS_SECRET_FILE": secret_file(s),
        "ONSALE_RESERVE_EVENTS_TIMEOUT_MS": str(TIMEOUT_MS),
        "ONSALE_RESERVE_EVENTS_CONNECT_TIMEOUT_MS": "500",
        "ONSALE_RESERVE_EVENTS_POLL_MS": "100",
        "ONSALE_RESERVE_EVENTS_RETRY_BASE_MS": str(RETRY_BASE_MS),
        "ONSALE_RESERVE_EVENTS_RETRY_MAX_MS": str(RETRY_MAX_MS),
        "ONSALE_RESERVE_EVENTS_RETENTION_HOURS": "1",
    }


def start_deliverer(s):
    Box.deliverer = Box.reserves.start(deliverer_env(s))
    return Box.deliverer


def setUpModule():
    s = stack.module_stack(s=EventsStack("events"))
    start_receiver()
    Box.reserves = Reserves(s)
    start_deliverer(s)


def tearDownModule():
    if Box.reserves:
        Box.reserves.stop_all()
    if Box.receiver:
        stop_receiver()


SEATS = [{"id": f"A-{i}", "section": "A", "price": 12000} for i in range(1, 11)]


class EventsCase(SagaCase):
    def setUp(self):
        super().setUp()
        Box.receiver.mode = "ok"
        Box.receiver.fail_first = False

    def events_of(self, pred):
        return [ev for ev in Box.receiver.delivered() if pred(ev)]

    def wait_events(self, pred, n=1, timeout=40, what="events delivered"):
        return wait_for(lambda: len(self.events_of(pred)) >= n and self.events_of(pred),
                        timeout, interval=0.1, what=what)

    def emit(self, ev, kind, key, data):
        return self.S.sql_value(f"select onsale_outbox_emit('{ev}', '{kind}', '{key}', "
                                f"'{json.dumps(data)}'::jsonb)")

    def book(self, ev, buyer, seats):
        t = self.S.token(ev, buyer)
        h = self.hold(ev, t, seats=seats).json
        r = self.confirm_src(h, t, "tok_visa")
        self.assertStatus(r, 201)
        return r.json

    def row(self, event_id):
        return self.S.sql(f"select attempts, coalesce(last_error, ''), delivered_at is not null "
                          f"from outbox where id = '{event_id}'")[0]

    def recorded(self, event_id):
        """The row once the deliverer recorded the delivery (just after the receiver's
        2xx)."""
        return wait_for(lambda: self.row(event_id)[2] == "t" and self.row(event_id), 10,
                        interval=0.05, what=f"{event_id} recorded delivered")

    def wait_all_recorded(self, ev):
        wait_for(lambda: self.S.sql_value(
            f"select count(*) from outbox where event_id = '{ev}' and delivered_at is null")
            == "0", 10, interval=0.05, what=f"every event of {ev} recorded delivered")


class Delivery(EventsCase):
    def test_confirmed_booking_is_delivered_signed_and_verified(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        b = self.book(ev, "signed", ["A-1", "A-2"])
        got = self.wait_events(lambda e: e["type"] == "booking.confirmed" and
                               e["data"]["event"] == ev, what="booking.confirmed")
        self.assertEqual(len(got), 1, got)
        e = got[0]
        self.assertEqual(set(e), {"id", "type", "created", "data"})
        self.assertRegex(e["id"], r"^evt_[0-9a-f]{32}$")
        self.assertLessEqual(abs(e["created"] - time.time()), 60)
        d = e["data"]
        self.assertEqual((d["booking_id"], d["checkout_id"]), (b["booking_id"], b["checkout_id"]))
        self.assertEqual((d["units"], d["quantity"], d["amount"], d["currency"]),
                         (["A-1", "A-2"], 2, 24000, "EUR"))
        # The row says delivered, in one attempt.
        self.assertEqual(self.recorded(e["id"]), ["1", "", "t"])
        # The room's creation was announced too, before the booking, on its own key.
        ph = self.events_of(lambda x: x["type"] == "room.phase_changed" and
                            x["data"]["event"] == ev)
        self.assertEqual([(x["data"]["change"], x["data"]["phase"]) for x in ph],
                         [("created", "on_sale")])
        self.assertGreaterEqual(Box.reserves.metric(Box.deliverer,
                                                    "onsale_reserve_events_deliveries_total",
                                                    outcome="delivered"), 2)

    def test_a_reserve_without_events_url_keeps_the_rows_and_counts_them(self):
        # The stack's own reserve delivers nothing: it reports the outbox, has no
        # deliveries series (the OnsaleEventsUndelivered alert keys on it).
        r = self.a.get("/metrics")
        self.assertStatus(r, 200)
        text = r.body.decode()
        self.assertIn("\nonsale_reserve_events_pending ", text)
        self.assertIn("\nonsale_reserve_events_oldest_pending_seconds ", text)
        self.assertNotIn("onsale_reserve_events_deliveries_total", text)
        self.assertGreaterEqual(Box.reserves.metric(Box.deliverer,
                                                    "onsale_reserve_events_deliveries_total"), 0)

    def test_the_example_receiver_refuses_forged_stale_and_unsigned(self):
        body = b'{"id":"evt_x","type":"t.t","created":1,"data":{}}'
        now = int(time.time())
        rv = webhook_receiver.verify
        self.assertEqual(rv(webhook_receiver.sign(SECRET, now, body), body, [SECRET]), now)
        self.assertEqual(rv(webhook_receiver.sign(OLD_SECRET, now, body), body,
                            [SECRET, OLD_SECRET]), now)
        cases = [
            (webhook_receiver.sign(b"not-the-secret-at-all", now, body), "mismatch"),
            (webhook_receiver.sign(SECRET, now, body + b" "), "mismatch"),
            (webhook_receiver.sign(SECRET, now - 301, body), "stale"),
            ("", "malformed"),
            (f"t={now}", "no_signature"),
            ("v1=" + "0" * 64, "no_timestamp"),
        ]
        for header, why in cases:
            with self.assertRaises(webhook_receiver.SignatureError, msg=header) as cm:
                rv(header, body, [SECRET])
            self.assertEqual(str(cm.exception), why, header)
        # Over HTTP: a forged request is answered 400 and taken by nobody.
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", Box.port, timeout=5)
        c.request("POST", "/", body=body, headers={
            "Onsale-Signature": webhook_receiver.sign(b"forged-secret-xxxxxxx", now, body),
            "Onsale-Event-Id": "evt_x", "Content-Type": "application/json"})
        r = c.getresponse()
        self.assertEqual((r.status, json.loads(r.read())["result"]), (400, "signature_mismatch"))
        c.close()
        self.assertEqual(self.events_of(lambda e: e["id"] == "evt_x"), [])

    def test_order_per_key_with_every_first_try_failing(self):
        Box.receiver.fail_first = True
        ev = stack.new_id("ord")
        keys = [f"k{i}-{uuid.uuid4().hex[:8]}" for i in range(3)]
        want = {k: [] for k in keys}
        for step in range(5):
            for k in keys:
                want[k].append(self.emit(ev, "test.step", k, {"event": ev, "key": k,
                                                              "step": step}))
        self.wait_events(lambda e: e["type"] == "test.step" and e["data"]["event"] == ev, n=15,
                         what="15 events, each after one refused try")
        got = self.events_of(lambda e: e["type"] == "test.step" and e["data"]["event"] == ev)
        for k in keys:
            self.assertEqual([e["id"] for e in got if e["data"]["key"] == k], want[k], k)
        # Stronger than the order of first 2xx: no event of a key was even tried before the
        # one ahead of it was answered 2xx.
        with Box.receiver.lock:
            log = [(e["id"], e["data"]["key"], st) for e, st in Box.receiver.log
                   if e["type"] == "test.step" and e["data"]["event"] == ev]
        for k in keys:
            done = set()
            for eid, key, st in log:
                if key != k:
                    continue
                i = want[k].index(eid)
                self.assertTrue(all(p in done for p in want[k][:i]),
                                f"{eid} tried before its predecessors were delivered")
                if st == 200:
                    done.add(eid)
        for eid in want[keys[0]]:
            self.assertEqual(self.recorded(eid), ["2", "", "t"])


class Failures(EventsCase):
    def test_receiver_down_then_retried_and_delivered(self):
        ev = stack.new_id("down")
        stop_receiver()
        restarted = [False]

        def restart():
            if not restarted[0]:
                start_receiver()
                restarted[0] = True
        self.addCleanup(restart)
        eid = self.emit(ev, "test.down", f"down-{ev}", {"event": ev})
        wait_for(lambda: int(self.row(eid)[0]) >= 3, 30, interval=0.1,
                 what="three refused connections")
        attempts, err, delivered = self.row(eid)
        self.assertEqual(delivered, "f")
        self.assertNotEqual(err, "")
        restart()
        got = self.wait_events(lambda e: e["id"] == eid, what="delivered once the receiver is up")
        self.assertEqual(got[0]["data"], {"event": ev})
        self.assertGreaterEqual(Box.reserves.metric(Box.deliverer,
                                                    "onsale_reserve_events_deliveries_total",
                                                    outcome="failed"), 3)

    def test_receiver_500_is_retried_with_backoff(self):
        ev = stack.new_id("r500")
        Box.receiver.mode = "fail"
        eid = self.emit(ev, "test.fail", f"fail-{ev}", {"event": ev})
        wait_for(lambda: int(self.row(eid)[0]) >= 4, 30, interval=0.1, what="four 500s")
        self.assertEqual(self.row(eid)[1], "status 500")
        # Each failed try is due again after rsv_outbox_backoff_ms (doubling, capped,
        # jittered: pinned in tests/unit/reserve/test_rsv_outbox.c).
        with Box.receiver.lock:
            n500 = sum(1 for e, st in Box.receiver.log if e["id"] == eid and st == 500)
        self.assertGreaterEqual(n500, 4)
        Box.receiver.mode = "ok"
        self.wait_events(lambda e: e["id"] == eid, what="delivered after the 500s")
        self.assertEqual(self.recorded(eid)[1], "")

    def test_slow_receiver_times_out_is_retried_and_the_loop_keeps_answering(self):
        ev = stack.new_id("slow")
        Box.receiver.mode = "slow"
        before = Box.reserves.metric(Box.deliverer, "onsale_reserve_events_deliveries_total",
                                     outcome="timeout")
        eid = self.emit(ev, "test.slow", f"slow-{ev}", {"event": ev})
        c = Box.reserves.client(Box.deliverer, timeout=5)
        self.addCleanup(c.close)
        deadline = time.monotonic() + 30
        while Box.reserves.metric(Box.deliverer, "onsale_reserve_events_deliveries_total",
                                  outcome="timeout") < before + 1:
            # The deliverer's loop is the one answering here: it keeps answering.
            self.assertEqual(c.get("/healthz").status, 200)
            self.assertLess(time.monotonic(), deadline, "no timeout counted")
            time.sleep(0.1)
        Box.receiver.mode = "ok"
        self.wait_events(lambda e: e["id"] == eid, what="delivered after the timeout")


class Retention(EventsCase):
    def test_delivered_rows_are_pruned_after_retention_undelivered_ones_never(self):
        ev = stack.new_id("keep")
        done = self.emit(ev, "test.keep", f"keep-{ev}-a", {"event": ev})
        self.wait_events(lambda e: e["id"] == done, what="the first delivered")
        self.recorded(done)
        # Delivered two hours ago, past events_retention_hours = 1: pruned on a stats tick.
        self.S.sql(f"update outbox set delivered_at = now() - interval '2 hours' "
                   f"where id = '{done}'")
        Box.receiver.mode = "fail"
        waiting = self.emit(ev, "test.keep", f"keep-{ev}-b", {"event": ev})
        wait_for(lambda: int(self.row(waiting)[0]) >= 1, 20, interval=0.1, what="tried once")
        # Undelivered for 1000 hours: kept, and it is the oldest pending event.
        self.S.sql(f"update outbox set created_at = now() - interval '1000 hours' "
                   f"where id = '{waiting}'")
        wait_for(lambda: self.S.sql_value(
            f"select count(*) from outbox where id = '{done}'") == "0", 20, interval=0.2,
            what="the delivered row pruned")
        self.assertEqual(self.S.sql_value(
            f"select count(*) from outbox where id = '{waiting}'"), "1")
        wait_for(lambda: Box.reserves.metric(
            Box.deliverer, "onsale_reserve_events_oldest_pending_seconds") >= 1000 * 3600, 20,
            interval=0.2, what="the oldest pending age reported")
        self.assertGreaterEqual(Box.reserves.metric(Box.deliverer,
                                                    "onsale_reserve_events_pending"), 1)
        Box.receiver.mode = "ok"
        self.wait_events(lambda e: e["id"] == waiting, what="delivered once the receiver takes it")
        self.recorded(waiting)


class Crash(EventsCase):
    def test_sigkill_mid_delivery_then_all_delivered_in_order_after_restart(self):
        ev = stack.new_id("kill")
        keys = [f"kill{i}-{uuid.uuid4().hex[:8]}" for i in range(4)]
        # Every delivery hangs: the deliverer is killed with POSTs in flight and rows
        # leased to it.
        Box.receiver.mode = "slow"
        want = {k: [] for k in keys}
        for step in range(3):
            for k in keys:
                want[k].append(self.emit(ev, "test.kill", k, {"event": ev, "key": k,
                                                              "step": step}))
        first = [want[k][0] for k in keys]
        wait_for(lambda: all(int(self.row(e)[0]) >= 1 for e in first), 20, interval=0.05,
                 what="the first event of every key claimed")
        Box.deliverer.send_signal(signal.SIGKILL)
        self.assertEqual(Box.deliverer.wait(timeout=10), -signal.SIGKILL)
        self.assertEqual(self.S.sql_value(
            f"select count(*) from outbox where event_id = '{ev}' and delivered_at is null"),
            "12")
        Box.receiver.mode = "ok"
        start_deliverer(self.S)
        self.wait_events(lambda e: e["type"] == "test.kill" and e["data"]["event"] == ev, n=12,
                         timeout=60, what="all 12 delivered after the restart")
        got = self.events_of(lambda e: e["type"] == "test.kill" and e["data"]["event"] == ev)
        for k in keys:
            self.assertEqual([e["id"] for e in got if e["data"]["key"] == k], want[k], k)
        self.wait_all_recorded(ev)


class Announcements(EventsCase):
    def test_the_booking_that_takes_the_last_unit_announces_sold_out_once(self):
        ev = self.new_event(seats=SEATS[:3], max_per_buyer=4)
        self.book(ev, "so1", ["A-1"])
        last = self.book(ev, "so2", ["A-2", "A-3"])
        # deliveries of different checkouts come in any order: the booking is the
        # second confirm's, whatever the order its events arrive in
        self.wait_events(lambda e: e["type"] == "booking.confirmed" and
                         e["data"]["event"] == ev, n=2, what="two bookings")
        got = self.wait_events(lambda e: e["type"] == "room.sold_out" and e["data"]["event"] == ev,
                               what="room.sold_out")
        self.assertEqual(got[0]["data"]["booking_id"], last["booking_id"])
        self.assertEqual(self.S.sql_value(
            f"select count(*) from outbox where event_id = '{ev}' and kind = 'room.sold_out'"),
            "1")

    def test_bookings_racing_for_the_last_units_announce_sold_out_exactly_once(self):
        # Each of n buyers holds one seat; every confirm goes at once, so the last few
        # bookings commit together: exactly one of them must see nothing left.
        for round_ in range(5):
            n = 8
            ev = self.new_event(seats=SEATS[:n], max_per_buyer=1)
            held = []
            for i in range(n):
                t = self.S.token(ev, f"race{i}")
                held.append((t, self.hold(ev, t, seats=[f"A-{i + 1}"]).json))
            results = [None] * n

            def go(i):
                c = self.S.client()
                try:
                    results[i] = self.confirm_src(held[i][1], held[i][0], "tok_visa", client=c)
                finally:
                    c.close()
            threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
            for th in threads:
                th.start()
            for th in threads:
                th.join(60)
            self.assertEqual([r.status for r in results], [201] * n, results)
            self.assertEqual(self.S.sql_value(
                f"select count(*) from outbox where event_id = '{ev}' and kind = 'room.sold_out'"),
                "1", f"round {round_}")
            self.assertEqual(self.S.sql_value(
                f"select count(*) from free_units where event_id = '{ev}'"), "0")

    def test_a_late_charge_refunded_announces_checkout_refunded(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        t = self.S.token(ev, "late")
        h = self.hold(ev, t, seats=["A-5"]).json
        r = self.confirm_src(h, t, f"tok_sim_arrive_{ARRIVE_MS}")
        self.assertStatus(r, 202)
        cid = r.json["checkout_id"]
        got = self.wait_events(lambda e: e["type"] == "checkout.refunded" and
                               e["data"]["checkout_id"] == cid, timeout=120,
                               what="checkout.refunded")
        d = got[0]["data"]
        self.assertEqual(self.checkout_state(cid), "refunded")
        self.assertEqual((d["event"], d["amount"], d["currency"], d["booking_id"]),
                         (ev, 12000, "EUR", None))
        self.assertTrue(d["charge_id"] and d["refund_id"], d)
        self.assertEqual(self.events_of(lambda e: e["type"] == "booking.confirmed" and
                                        e["data"]["checkout_id"] == cid), [])

    def test_a_box_office_cancel_announces_cancelled_then_refunded_in_order(self):
        ev = self.new_event(seats=SEATS[:2], max_per_buyer=4)
        b = self.book(ev, "boxoffice", ["A-1", "A-2"])
        self.wait_events(lambda e: e["type"] == "room.sold_out" and e["data"]["event"] == ev,
                         what="sold out first")
        r = self.S.admin("POST", f"/admin/bookings/{b['booking_id']}/cancel")
        self.assertStatus(r, 200)
        got = self.wait_events(lambda e: e["data"].get("checkout_id") == b["checkout_id"], n=3,
                               what="confirmed, cancelled, refunded")
        self.assertEqual([e["type"] for e in got],
                         ["booking.confirmed", "booking.cancelled", "checkout.refunded"])
        c, f = got[1]["data"], got[2]["data"]
        self.assertEqual((c["booking_id"], c["whole"], c["units"], c["amount"]),
                         (b["booking_id"], True, ["A-1", "A-2"], 24000))
        self.assertEqual((f["refund_reason"], f["amount"], f["office_refund_id"]),
                         ("box_office", 24000, c["office_refund_id"]))
        self.assertTrue(f["refund_id"], f)
        # The units are free again, announced: the event can sell out a second time.
        self.assertEqual(self.S.sql_value(
            f"select count(*) from free_units where event_id = '{ev}'"), "2")
        back = self.wait_events(lambda e: e["type"] == "room.phase_changed" and
                                e["data"]["event"] == ev and e["data"]["change"] == "units_back",
                                what="room.phase_changed units_back")
        self.assertEqual(back[0]["data"]["phase"], "on_sale")
        self.book(ev, "boxoffice2", ["A-1", "A-2"])
        self.wait_events(lambda e: e["type"] == "room.sold_out" and e["data"]["event"] == ev, n=2,
                         what="sold out again")

    def test_changing_an_event_announces_room_phase_changed(self):
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        r = self.S.create_event(ev, seats=SEATS, max_per_buyer=2)  # settings only
        self.assertIn(r.status, (200, 201), repr(r))
        got = self.wait_events(lambda e: e["type"] == "room.phase_changed" and
                               e["data"]["event"] == ev, n=2, what="two room.phase_changed")
        self.assertEqual([(e["data"]["change"], e["data"]["version"]) for e in got],
                         [("created", 1), ("updated", 2)])


class Rotation(EventsCase):
    def signed_with(self, eid, secret):
        header, body = Box.receiver.signed[eid]
        try:
            webhook_receiver.verify(header, body, [secret])
            return True
        except webhook_receiver.SignatureError:
            return False

    def reload_log_lines(self, word):
        log = os.path.join(self.S.root, f"reserve-{Box.deliverer.port}.log")
        with open(log, errors="replace") as f:
            return sum(1 for line in f if word in line)

    def delivered_one(self, ev, n):
        eid = self.emit(ev, "test.rotate", f"rot-{ev}-{n}", {"event": ev, "n": n})
        self.wait_events(lambda e: e["id"] == eid, what=f"event {n} delivered")
        return eid

    def test_sighup_switches_the_signing_secret_and_a_bad_file_keeps_it(self):
        ev = stack.new_id("rot")
        self.assertTrue(self.signed_with(self.delivered_one(ev, 0), SECRET))
        # The receiver learns the new secret first, then the reserve signs with it.
        Box.receiver.secrets = [NEW_SECRET, SECRET, OLD_SECRET]
        self.addCleanup(write_secrets, self.S, SECRET + b"\n" + OLD_SECRET + b"\n")
        self.addCleanup(lambda: Box.deliverer.send_signal(signal.SIGHUP))
        write_secrets(self.S, NEW_SECRET + b"\n" + SECRET + b"\n")
        Box.deliverer.send_signal(signal.SIGHUP)
        n = [1]

        def new_signs():
            n[0] += 1
            return self.signed_with(self.delivered_one(ev, n[0]), NEW_SECRET)
        wait_for(new_signs, 20, interval=0.1, what="deliveries signed with the new secret")
        # A file that does not parse changes nothing: the new secret keeps signing.
        kept = self.reload_log_lines("kept as it was")
        write_secrets(self.S, NEW_SECRET + b"\nshort\n")
        Box.deliverer.send_signal(signal.SIGHUP)
        wait_for(lambda: self.reload_log_lines("kept as it was") > kept, 20, interval=0.1,
                 what="the reload refused")
        eid = self.delivered_one(ev, 1000)
        self.assertTrue(self.signed_with(eid, NEW_SECRET))
        self.assertFalse(self.signed_with(eid, SECRET))


if __name__ == "__main__":
    import unittest
    unittest.main()
