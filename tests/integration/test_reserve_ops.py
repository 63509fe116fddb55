"""Operator surface: /healthz, /readyz and the Prometheus metrics docs/design.md promises."""

import collections
import math
import time
import uuid

import stack
from stack import metric_sum


def setUpModule():
    stack.module_stack("ops")


SEATS = [{"id": f"A-{i}", "section": "A", "price": 12000} for i in range(1, 5)]

COUNTERS = ["onsale_reserve_holds_total", "onsale_reserve_hold_conflicts_total",
            "onsale_reserve_invalid_tokens_total", "onsale_reserve_confirmations_total",
            "onsale_reserve_uniqueness_conflicts_total"]
HISTOGRAMS = ["onsale_reserve_hold_to_confirm_seconds", "onsale_reserve_request_seconds"]


class HealthAndMetrics(stack.ReserveTestCase):
    def test_healthz_readyz(self):
        h = self.c.get("/healthz")
        self.assertStatus(h, 200)
        self.assertEqual(h.json, {"status": "ok"}, repr(h))
        self.assertStatus(self.c.get("/readyz"), 200)

    def test_metrics_after_traffic(self):
        m0 = self.S.metrics()
        ev = self.new_event(seats=SEATS, max_per_buyer=4)
        t1, t2 = self.S.token(ev, "m1"), self.S.token(ev, "m2")
        h = self.hold(ev, t1, seats=["A-1"])
        self.assertIn("no-store", h.header("cache-control") or "",
                      f"hold answer without Cache-Control: no-store: {h.headers}")
        self.hold(ev, t2, seats=["A-2"])
        self.assertStatus(self.c.post(f"/v1/events/{ev}/holds", {"seats": ["A-1"]}, token=t2),
                          409, "seat_unavailable")
        self.assertStatus(self.c.post(f"/v1/events/{ev}/holds", {"seats": ["A-3"]},
                                      token="not.a.token"), 401, "invalid_token")
        r = self.c.post(f"/v1/holds/{h.json['hold_id']}/confirm",
                        {"payment": {"amount": h.json["amount"], "currency": "EUR",
                                     "source": "tok_visa"}},
                        token=t1, headers={"Idempotency-Key": uuid.uuid4().hex})
        self.assertStatus(r, 201)

        resp = self.a.get("/metrics")
        self.assertStatus(resp, 200)
        self.assertTrue((resp.header("content-type") or "").startswith("text/plain"),
                        f"/metrics content-type: {resp.headers}")
        m = stack.parse_metrics(resp.body.decode())
        text = resp.body.decode()
        missing = [n for n in COUNTERS if n not in m]
        missing += [f"{n}_{s}" for n in HISTOGRAMS for s in ("bucket", "sum", "count")
                    if f"{n}_{s}" not in m]
        self.assertEqual(missing, [], f"missing series in /metrics:\n{text[:3000]}")
        for n in COUNTERS + HISTOGRAMS:
            self.assertIn(f"# TYPE {n} ", text, f"no TYPE line for {n}")

        m = self.S.metrics()  # every reserve's (two behind HAProxy in the cluster topology)

        def delta(name):
            return metric_sum(m, name) - metric_sum(m0, name)

        self.assertGreaterEqual(delta("onsale_reserve_holds_total"), 2)
        self.assertGreaterEqual(delta("onsale_reserve_hold_conflicts_total"), 1)
        self.assertGreaterEqual(delta("onsale_reserve_invalid_tokens_total"), 1)
        self.assertGreaterEqual(delta("onsale_reserve_confirmations_total"), 1)
        self.assertGreaterEqual(delta("onsale_reserve_hold_to_confirm_seconds_count"), 1)
        self.assertGreaterEqual(metric_sum(m, "onsale_reserve_uniqueness_conflicts_total"), 0)

        inf = [v for labels, v in m["onsale_reserve_hold_to_confirm_seconds_bucket"]
               if labels.get("le") == "+Inf"]
        self.assertTrue(inf, "hold_to_confirm histogram has no le=\"+Inf\" bucket")
        self.assertEqual(sum(inf), metric_sum(m, "onsale_reserve_hold_to_confirm_seconds_count"))

        endpoints = {labels.get("endpoint")
                     for labels, _ in m["onsale_reserve_request_seconds_count"]}
        self.assertNotIn(None, endpoints,
                         "onsale_reserve_request_seconds series without an endpoint label")
        self.assertGreaterEqual(len(endpoints), 2,
                                f"request latency not split per endpoint: {endpoints}")
        served = sum(v for _, v in m["onsale_reserve_request_seconds_count"]) - sum(
            v for _, v in m0.get("onsale_reserve_request_seconds_count", []))
        self.assertGreaterEqual(served, 5, "request histogram did not count the requests")


class UnknownEvents(stack.ReserveTestCase):
    """Made-up event ids never reach Postgres one query per request (the reserve
    keeps the list of event ids and re-lists it at most a few times a second), and an
    event created a moment ago is found at once."""

    def test_a_flood_of_unknown_events_costs_a_few_queries(self):
        known = self.new_event(seats=[{"id": "A-1", "section": "A", "price": 100}])
        self.assertEqual(self.c.get(f"/v1/events/{known}/availability").status, 200)
        # What the reserves query meanwhile anyway (the stock feed re-checks the version of
        # every event live at a worker, a shared stack's earlier modules' too): measured
        # over a quiet second first, and allowed for in proportion.
        quiet = metric_sum(self.S.metrics(), "onsale_reserve_catalog_queries_total")
        time.sleep(1.0)
        before = metric_sum(self.S.metrics(), "onsale_reserve_catalog_queries_total")
        background = before - quiet
        reqs = [self.S.req("GET", f"/v1/events/nope-{uuid.uuid4().hex[:16]}/availability")
                for _ in range(400)]
        t0 = time.monotonic()
        res = self.S.burst(reqs)
        elapsed = time.monotonic() - t0
        self.assertTrue(all(r.status == 404 and r.err == "unknown_event" for r in res),
                        stack.summarize(res))
        after = metric_sum(self.S.metrics(), "onsale_reserve_catalog_queries_total")
        # Each worker of each reserve re-lists at most once per 250 ms while unknown ids
        # arrive, so the queries follow the burst's duration, never its request count.
        listers = 2 * (2 if getattr(self.S, "cluster", False) else 1)
        bound = listers * (int(elapsed / 0.25) + 2) + math.ceil(background * (elapsed + 0.5))
        self.assertLessEqual(after - before, bound,
                             f"{after - before:.0f} catalogue queries in {elapsed:.2f} s")
        self.assertLess(after - before, len(reqs) / 2, "one Postgres query per unknown event?")
        # An event created now (through the admin API) is found straight away.
        fresh = self.new_event(seats=[{"id": "A-1", "section": "A", "price": 100}])
        self.assertEqual(self.c.get(f"/v1/events/{fresh}/availability").status, 200)


class ReadPool(stack.ReserveTestCase):
    """Reads have Postgres connections of their own (pg_read_pool_size), so a
    flood of slow reads never queues ahead of a confirmation. The reads are made slow in
    Postgres itself: a restrictive row-security policy on checkouts sleeps READ_DELAY for
    each row read by the checkout-view query (recognised by its text, current_query()),
    and by no other statement — the confirmations' own statements run at full speed.

    Checked against a reserve built with one pool for both (pg_read = pg in rsv_server.c):
    the confirmations then took 1.7 s (median) to 3.4 s; with the read pool 0.2–0.26 s
    while half the reads waited out pg_timeout_ms. The test also found a confirmation on
    a worker that had not loaded the event yet waiting 2.6 s behind the reads for the
    event's first load; catalogue loads now go first in the read pool's queue
    (rsv_pg_query_first)."""

    READ_DELAY = 0.2    # seconds per checkout row read by the view query
    READS = 400         # over READ_CONNS connections, two rounds
    READ_CONNS = 200
    BUYERS = 8
    CONFIRM_BOUND = 2.0  # seconds; a shared pool makes them wait behind the reads' queue

    def slow_checkout_views(self):
        q = ("CREATE POLICY it_everything ON checkouts USING (true) WITH CHECK (true);"
             "CREATE POLICY it_slow_view ON checkouts AS RESTRICTIVE FOR SELECT USING ("
             " CASE WHEN current_query() LIKE 'SELECT json_build_object(''checkout_id''%'"
             f" THEN (SELECT true FROM pg_sleep({self.READ_DELAY})) ELSE true END);"
             "ALTER TABLE checkouts ENABLE ROW LEVEL SECURITY;"
             "ALTER TABLE checkouts FORCE ROW LEVEL SECURITY;")
        self.S.sql(q)
        self.addCleanup(self.S.sql, "ALTER TABLE checkouts NO FORCE ROW LEVEL SECURITY;"
                                    "ALTER TABLE checkouts DISABLE ROW LEVEL SECURITY;"
                                    "DROP POLICY IF EXISTS it_slow_view ON checkouts;"
                                    "DROP POLICY IF EXISTS it_everything ON checkouts;")

    def test_a_flood_of_slow_reads_does_not_delay_confirmations(self):
        import threading
        ev = self.new_event(seats=[{"id": f"A-{i}", "section": "A", "price": 5000}
                                   for i in range(self.BUYERS + 1)], max_per_buyer=0)
        # one confirmed checkout: the row every read of the flood looks at
        t0 = self.S.token(ev, "reader")
        h0 = self.hold(ev, t0, seats=["A-0"])
        first = self.confirm(h0.json["hold_id"], t0, h0.json["amount"])
        self.assertStatus(first, 201)
        view = f"/v1/checkouts/{first.json['checkout_id']}"
        toks = [self.S.token(ev, f"buyer{i}") for i in range(self.BUYERS)]
        holds = [self.hold(ev, toks[i], seats=[f"A-{i + 1}"]).json for i in range(self.BUYERS)]
        self.slow_checkout_views()
        reads = [self.S.req("GET", view, token=t0) for _ in range(self.READS)]
        batches = [reads[i:i + self.READ_CONNS] for i in range(0, self.READS, self.READ_CONNS)]
        flood = {}
        th = threading.Thread(target=lambda: flood.update(r=self.S.bursts(batches, timeout=120)))
        th.start()
        try:
            # the reads are queued in the reserve: the read pool is busy with them
            stack.wait_for(lambda: int(self.S.sql_value(
                "SELECT count(*) FROM pg_stat_activity WHERE query LIKE "
                "'SELECT json_build_object(''checkout_id''%' AND state = 'active'")) > 0,
                30, interval=0.05, what="the slow reads running in Postgres")
            confirms = self.S.burst([
                self.S.req("POST", f"/v1/holds/{h['hold_id']}/confirm", token=toks[i],
                           body={"payment": {"amount": h["amount"], "currency": "EUR",
                                             "source": "tok_visa"}},
                           headers={"Idempotency-Key": f"starve-{ev}-{i}"})
                for i, h in enumerate(holds)])
            still_reading = th.is_alive()
        finally:
            th.join(180)
        stack.note("confirms " + stack.summarize(confirms))
        stack.note("reads " + stack.summarize(
            [r for batch in flood.get("r", []) for r in batch]))
        self.assertTrue(still_reading, "the flood was over before the confirmations ended: "
                        "the reads were not slow enough to test anything")
        for i, r in enumerate(confirms):
            self.assertStatus(r, 201, msg=f"confirmation {i} during the flood:")
            self.assertLess(r.latency, self.CONFIRM_BOUND,
                            f"confirmation {i} waited {r.latency:.2f} s behind the reads")
        # every read was answered (200, or 503 when its own pool's queue waited too long)
        got = [r.status for batch in flood["r"] for r in batch]
        self.assertEqual(len(got), self.READS)
        self.assertLessEqual(set(got), {200, 503}, str(collections.Counter(got)))
