"""Read your writes across reserves (cluster topology: two reserves behind HAProxy).

An event the operator just created through one reserve's admin API must be known to
every reserve once that call has answered: holds and confirmations routed to the other
reserve at once answer as on the first, never 404 unknown_event (regression:
new_event_unknown_on_the_other_reserve — the other reserve trusted its cached list of
event ids for up to 250 ms and its "missing" entries for a second), and a seat the
operator just added is never 404 unknown_seat there (regression:
new_seat_unknown_on_the_other_reserve — its cached inventory was re-checked every
catalog_refresh_ms only), also after Redis lost the generation. A flood of made-up event ids still costs no Postgres query per
request.
"""

import uuid

import cluster_util as cu
import stack
from stack import metric_sum, summarize

S = None
ROUNDS = 4
HOLDS = 8


def setUpModule():
    global S
    S = cu.module_cluster_stack("catalog")


def payment(amount):
    return {"payment": {"amount": amount, "currency": "EUR", "source": "tok_visa"}}


class ReadYourWrites(stack.ReserveTestCase):
    def create_now(self, **spec):
        """PUT through the first reserve's admin API, with no wait after its answer."""
        ev = stack.new_id("ryw")
        r = S.admin("PUT", f"/admin/events/{ev}", {"currency": "EUR", **spec})
        self.assertStatus(r, 201, msg="create:")
        return ev

    def test_new_event_is_known_on_every_reserve_at_once(self):
        seats = [{"id": f"A-{i}", "section": "A", "price": 1000} for i in range(1, HOLDS + 1)]
        for n in range(ROUNDS):
            ev = self.create_now(seats=seats, max_per_buyer=2)
            toks = [S.token(ev, f"b{n}-{i}") for i in range(HOLDS)]
            # every hold on its own connection at once: HAProxy spreads them over both
            reqs = [S.req("POST", f"/v1/events/{ev}/holds", token=t,
                          body={"seats": [f"A-{i + 1}"]}) for i, t in enumerate(toks)]
            res = S.burst(reqs)
            self.assertEqual([r.status for r in res], [201] * HOLDS,
                             f"round {n}: holds right after the PUT: {summarize(res)}")
            h = res[0].json
            key = uuid.uuid4().hex
            req = S.req("POST", f"/v1/holds/{h['hold_id']}/confirm", token=toks[0],
                        body=payment(h["amount"]), headers={"Idempotency-Key": key})
            res = S.burst([req] * 5)
            self.assertEqual([r for r in res if r.status == 404], [],
                             f"round {n}: confirms of a fresh event's hold: {summarize(res)}")
            self.assertEqual(sum(r.status == 201 for r in res), 1,
                             f"round {n}: one confirmation: {summarize(res)}")

    def test_replaced_inventory_is_current_on_every_reserve_at_once(self):
        seats = [{"id": f"A-{i}", "section": "A", "price": 1000} for i in range(1, 2 * HOLDS + 1)]
        ev = self.create_now(seats=seats[:HOLDS], max_per_buyer=2)
        # both reserves cache the first inventory (a hold each way, spread by HAProxy)
        warm = [S.req("POST", f"/v1/events/{ev}/holds", token=S.token(ev, f"w{i}"),
                      body={"seats": [f"A-{i + 1}"]}) for i in range(HOLDS)]
        res = S.burst(warm)
        self.assertEqual({r.status for r in res}, {201}, f"warm-up: {summarize(res)}")
        r = S.admin("PUT", f"/admin/events/{ev}",
                    {"currency": "EUR", "seats": seats, "max_per_buyer": 2})
        self.assertStatus(r, 200, msg="replace:")
        reqs = [S.req("POST", f"/v1/events/{ev}/holds", token=S.token(ev, f"n{i}"),
                      body={"seats": [f"A-{HOLDS + i + 1}"]}) for i in range(HOLDS)]
        res = S.burst(reqs)
        self.assertEqual([r.status for r in res], [201] * HOLDS,
                         f"holds of the new seats right after the PUT: {summarize(res)}")

    def test_a_redis_loss_does_not_bring_an_old_generation_back(self):
        """Regression: the generation was a counter (INCR), which starts again after Redis
        loses it. A reserve that had read 1 (after a loss, the first new event) read 1
        again after the next loss and the next new event, took its stale list of ids for
        current, and answered 404 unknown_event for an event that existed."""
        seats = [{"id": f"A-{i}", "section": "A", "price": 1000} for i in range(1, HOLDS + 1)]
        for n in range(2):
            self.assertEqual(S.redis("FLUSHALL"), "OK")
            ev = self.create_now(seats=seats, max_per_buyer=HOLDS)
            reqs = [S.req("POST", f"/v1/events/{ev}/holds", token=S.token(ev, f"l{n}-{i}"),
                          body={"seats": [f"A-{i + 1}"]}) for i in range(HOLDS)]
            res = S.burst(reqs)  # over both reserves and their workers
            self.assertEqual([r.status for r in res], [201] * HOLDS,
                             f"loss {n + 1}: holds of the event created after it: "
                             f"{summarize(res)}")

    def test_bogus_event_flood_costs_no_query_per_request(self):
        self.create_now(pools=[{"id": "floor", "capacity": 5, "price": 100}])
        before = metric_sum(S.metrics(), "onsale_reserve_catalog_queries_total")
        ghost = stack.new_id("ghost")
        tok = S.token(ghost, "nobody")
        reqs = [S.req("POST", f"/v1/events/{ghost}/holds", token=tok,
                      body={"pool": "floor", "quantity": 1}) for _ in range(100)]
        res = S.burst(reqs)
        self.assertEqual({r.status for r in res}, {404}, summarize(res))
        self.assertEqual({r.err for r in res}, {"unknown_event"}, summarize(res))
        spent = metric_sum(S.metrics(), "onsale_reserve_catalog_queries_total") - before
        # the background re-checks of cached events may add a few; never one per request
        self.assertLess(spent, 20, f"catalogue queries for 100 bogus-id requests: {spent}")
