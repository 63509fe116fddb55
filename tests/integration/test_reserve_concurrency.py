"""Invariants 1–3 under real concurrency: one seat, one GA pool, overlapping multi-seat
holds. Every burst opens all its TLS connections first, then fires every request."""

import os
import collections
import threading
import time

import stack
from stack import numbers, pool_available, seat_state, summarize


def setUpModule():
    stack.module_stack("concurrency")


class OneSeatThousandBuyers(stack.ReserveTestCase):
    def test_1000_concurrent_holds_on_one_seat_exactly_one_wins(self):
        ev = self.new_event(seats=[{"id": "A-1", "section": "A", "price": 12000}],
                            max_per_buyer=4, hold_ttl_seconds=300)
        toks = self.S.tokens(ev, "fan", 1000)
        reqs = [self.S.req("POST", f"/v1/events/{ev}/holds", token=t, body={"seats": ["A-1"]})
                for t in toks]
        res = self.S.burst(reqs)
        summary = summarize(res)
        stack.note(summary)

        failed = [r for r in res if r.status is None]
        self.assertEqual(failed, [], f"transport errors: {summary}")
        won = [(i, r) for i, r in enumerate(res) if r.status == 201]
        lost = [r for r in res if r.status == 409 and r.err == "seat_unavailable"]
        self.assertEqual(len(won), 1, f"expected exactly 1×201: {summary}")
        self.assertEqual(len(lost), 999, f"expected 999×409 seat_unavailable: {summary}")
        for r in lost:
            self.assertEqual(r.json.get("unavailable"), ["A-1"], f"409 body: {r!r}")

        # Every answer, winner's and losers', within 1 s of its send (answered at once,
        # no waiting), measured from the write to the full response.
        # The sanitizer build (several times slower by design) checks memory safety
        # here, not latency; the bound holds for the build that ships. So does the cluster
        # run (six Redis nodes, HAProxy and two of each service on the same two cores).
        if os.environ.get("ONSALE_SANITIZE") != "1" and not self.S.cluster:
            slow = sorted((r.latency for r in res if r.latency >= 1.0), reverse=True)
            self.assertEqual(slow, [], f"{len(slow)} answers took ≥ 1 s: {summary}")

        i, w = won[0]
        self.assertEqual(w.json.get("seats"), ["A-1"], repr(w))
        self.assertEqual(w.json.get("event"), ev, repr(w))
        for f in ("hold_id", "expires_at", "amount", "currency"):
            self.assertIn(f, w.json, repr(w))
        self.assertEqual(w.json["amount"], 12000, repr(w))
        g = self.c.get(f"/v1/holds/{w.json['hold_id']}", token=toks[i])
        self.assertStatus(g, 200)
        self.assertEqual(g.json.get("state"), "held", repr(g))
        self.wait_json(f"/v1/events/{ev}/seats", lambda d: seat_state(d, "A-1") == "held",
                       what="seat map showing A-1 held")


class GeneralAdmission(stack.ReserveTestCase):
    def _redis_ints(self, ev):
        return self.S.redis.int_values(f"*{ev}*")

    def test_500_buyers_on_100_unit_pool_exactly_100_holds(self):
        ev = self.new_event(pools=[{"id": "floor", "capacity": 100, "price": 6000}],
                            max_per_buyer=4, hold_ttl_seconds=300)
        # The pool counter exists before the rush (seeded at creation or first touch).
        toks = self.S.tokens(ev, "ga", 501)
        warm = self.hold(ev, toks[500], pool="floor", quantity=1)
        self.assertStatus(self.c.delete(f"/v1/holds/{warm.json['hold_id']}", token=toks[500]),
                          204)
        self.assertTrue(self._redis_ints(ev), f"no integer Redis value for event {ev}: "
                        f"cannot find the pool counter ({self.S.redis.scan_keys('*' + ev + '*')})")

        # Sample Redis and the availability endpoint while the burst runs.
        samples = {"redis": [], "avail": []}
        stop = threading.Event()

        def monitor():
            r = self.S.new_redis()
            c = self.S.client()
            try:
                while not stop.is_set():
                    samples["redis"].append(r.int_values(f"*{ev}*"))
                    a = c.get(f"/v1/events/{ev}/availability")
                    if a.status == 200:
                        samples["avail"].append(a.json)
                    time.sleep(0.01)
            finally:
                r.close()
                c.close()

        th = threading.Thread(target=monitor, daemon=True)
        th.start()
        try:
            reqs = [self.S.req("POST", f"/v1/events/{ev}/holds", token=t,
                               body={"pool": "floor", "quantity": 1}) for t in toks[:500]]
            res = self.S.burst(reqs)
            time.sleep(0.3)
        finally:
            stop.set()
            th.join(10)
        summary = summarize(res)
        stack.note(f"{summary}; {len(samples['avail'])} availability and "
                   f"{len(samples['redis'])} Redis samples during the burst")

        self.assertEqual([r for r in res if r.status is None], [], summary)
        won = [r for r in res if r.status == 201]
        lost = [r for r in res if r.status == 409 and r.err in ("sold_out", "insufficient")]
        self.assertEqual(len(won), 100, f"expected exactly 100×201: {summary}")
        self.assertEqual(len(lost), 400, f"expected 400×409 sold_out/insufficient: {summary}")
        self.assertEqual(len({r.json["hold_id"] for r in won}), 100, "hold ids not distinct")
        for r in won:
            self.assertEqual((r.json.get("pool"), r.json.get("quantity")), ("floor", 1), repr(r))
        for r in lost:
            if r.err == "insufficient":
                self.assertIn(r.json.get("available"), (0,), repr(r))

        final = self.wait_json(f"/v1/events/{ev}/availability",
                               lambda d: pool_available(d, "floor") == 0,
                               what="availability: floor available 0")
        for doc in samples["avail"] + [final]:
            neg = [(p, v) for p, v in numbers(doc) if v < 0]
            self.assertEqual(neg, [], f"negative count in availability {doc}")
            av = pool_available(doc, "floor")
            self.assertIsNotNone(av, f"no 'floor' entry with 'available' in {doc}")
        self.assertGreater(len(samples["redis"]), 0)
        for snap in samples["redis"] + [self._redis_ints(ev)]:
            neg = {k: v for k, v in snap.items() if v < 0}
            self.assertEqual(neg, {}, "negative integer in Redis for the event")

        # A 501st buyer still gets sold_out.
        extra = self.S.token(ev, "late-fan")
        r = self.c.post(f"/v1/events/{ev}/holds", {"pool": "floor", "quantity": 1}, token=extra)
        self.assertStatus(r, 409, "sold_out")

    def test_released_units_return_to_the_pool(self):
        ev = self.new_event(pools=[{"id": "floor", "capacity": 5, "price": 6000}],
                            max_per_buyer=0)
        toks = self.S.tokens(ev, "r", 7)
        holds = [self.hold(ev, t, pool="floor", quantity=1).json["hold_id"] for t in toks[:5]]
        self.assertStatus(self.c.post(f"/v1/events/{ev}/holds", {"pool": "floor", "quantity": 1},
                                      token=toks[5]), 409, "sold_out")
        self.assertStatus(self.c.delete(f"/v1/holds/{holds[0]}", token=toks[0]), 204)
        self.hold(ev, toks[5], pool="floor", quantity=1)
        r = self.c.post(f"/v1/events/{ev}/holds", {"pool": "floor", "quantity": 2}, token=toks[6])
        self.assertStatus(r, 409, "sold_out")


class OverlappingMultiSeat(stack.ReserveTestCase):
    ROUNDS = 200
    BATCH = 50

    def test_overlapping_ab_bc_at_most_one_wins_never_partial(self):
        ev = self.new_event(sections=[{"id": "R", "rows": self.ROUNDS, "seats_per_row": 3,
                                       "price": 100}], max_per_buyer=0, hold_ttl_seconds=300)
        tx, ty, probe = (self.S.token(ev, s) for s in ("buyer-x", "buyer-y", "prober"))
        seats = lambda r: (f"R-{r}-1", f"R-{r}-2", f"R-{r}-3")  # noqa: E731

        batches, order = [], []
        for start in range(1, self.ROUNDS + 1, self.BATCH):
            batch = []
            for r in range(start, min(start + self.BATCH, self.ROUNDS + 1)):
                a, b, c = seats(r)
                rx = self.S.req("POST", f"/v1/events/{ev}/holds", token=tx, body={"seats": [a, b]})
                ry = self.S.req("POST", f"/v1/events/{ev}/holds", token=ty, body={"seats": [b, c]})
                batch += [rx, ry] if r % 2 else [ry, rx]   # alternate who is written first
                order.append(r)
            batches.append(batch)
        results = [x for b in self.S.bursts(batches) for x in b]

        outcome = {}
        problems = []
        for k, r in enumerate(order):
            pair = results[2 * k:2 * k + 2]
            rx, ry = (pair if r % 2 else pair[::-1])
            a, b, c = seats(r)
            for who, resp, want, other in (("x", rx, [a, b], c), ("y", ry, [b, c], a)):
                if resp.status == 201:
                    if sorted(resp.json.get("seats", [])) != sorted(want):
                        problems.append(f"round {r}: {who} 201 with seats {resp!r}")
                elif resp.status == 409 and resp.err == "seat_unavailable":
                    if resp.json.get("unavailable") != [b]:
                        problems.append(f"round {r}: {who} lost, unavailable should be [{b}]: "
                                        f"{resp!r}")
                else:
                    problems.append(f"round {r}: {who}: unexpected {resp!r}")
            winners = [w for w, resp in (("x", rx), ("y", ry)) if resp.status == 201]
            if len(winners) > 1:
                problems.append(f"round {r}: both won: {rx!r} {ry!r}")
            outcome[r] = winners[0] if len(winners) == 1 else None
        stack.note(f"{self.ROUNDS} rounds: {summarize(results)}; winners "
                   f"{dict(collections.Counter(outcome.values()))}")
        self.assertEqual(problems, [], "\n".join(problems[:20]))

        # A third buyer probes every seat: the winner's two are taken, the rest is free
        # (the loser holds nothing — no partial hold).
        probes, expect = [], []
        for r in order:
            a, b, c = seats(r)
            held = {"x": {a, b}, "y": {b, c}, None: set()}[outcome[r]]
            for s in (a, b, c):
                probes.append(self.S.req("POST", f"/v1/events/{ev}/holds", token=probe,
                                         body={"seats": [s]}))
                expect.append((r, s, 409 if s in held else 201))
        pres = [x for b in self.S.bursts([probes[i:i + 100] for i in range(0, len(probes), 100)])
                for x in b]
        bad = [f"round {r} seat {s}: expected {st}, got {p!r} (winner {outcome[r]})"
               for (r, s, st), p in zip(expect, pres) if p.status != st]
        self.assertEqual(bad, [], "\n".join(bad[:20]))

        # With fresh seats and an all-or-nothing atomic hold, the first script to run
        # takes both seats: a round nobody won means acquisition was not atomic.
        nobody = [r for r in order if outcome[r] is None]
        self.assertEqual(nobody, [], f"rounds with no winner (non-atomic multi-seat hold?): "
                         f"{nobody[:20]}; winners: {collections.Counter(outcome.values())}")


class RacesOfOneBuyer(stack.ReserveTestCase):
    def test_per_buyer_limit_holds_under_concurrency(self):
        ev = self.new_event(seats=[{"id": f"A-{i}", "section": "A", "price": 10}
                                   for i in range(1, 21)], max_per_buyer=4)
        t = self.S.token(ev, "scalper")
        res = self.S.burst([self.S.req("POST", f"/v1/events/{ev}/holds", token=t,
                                       body={"seats": [f"A-{i}"]}) for i in range(1, 21)])
        summary = summarize(res)
        stack.note(summary)
        self.assertEqual(sum(r.status == 201 for r in res), 4, f"max_per_buyer 4: {summary}")
        self.assertEqual(sum(r.status == 429 and r.err == "limit_exceeded" for r in res), 16,
                         summary)
        # The 16 refused seats are free for someone else.
        won = {r.json["seats"][0] for r in res if r.status == 201}
        free = [f"A-{i}" for i in range(1, 21) if f"A-{i}" not in won]
        for k, tok in enumerate(self.S.tokens(ev, "fan", 4)):
            self.hold(ev, tok, seats=free[4 * k:4 * k + 4])

    def test_release_racing_confirm_never_books_a_released_seat(self):
        # The release is sent 0…78 ms after the confirm, so that it lands before, during
        # and after the conversion in different rounds.
        rounds = 40
        ev = self.new_event(seats=[{"id": f"A-{i}", "section": "A", "price": 10}
                                   for i in range(1, rounds + 1)], max_per_buyer=0)
        t, probe = self.S.token(ev, "indecisive"), self.S.token(ev, "probe")
        holds = [self.hold(ev, t, seats=[f"A-{i}"]).json for i in range(1, rounds + 1)]
        reqs = []
        for k, h in enumerate(holds):
            conf = self.S.req("POST", f"/v1/holds/{h['hold_id']}/confirm", token=t,
                              body={"payment": {"amount": h["amount"], "currency": "EUR",
                                                "source": "tok_visa"}},
                              headers={"Idempotency-Key": f"race-{k}"})
            rel = stack.delayed(self.S.req("DELETE", f"/v1/holds/{h['hold_id']}", token=t),
                                0.002 * k)
            reqs += [conf, rel] if k % 2 else [rel, conf]
        res = self.S.burst(reqs)
        stack.note(summarize(res))
        outcomes = [(c.status, r.status) for c, r in
                    ((res[2 * k], res[2 * k + 1]) if k % 2 else (res[2 * k + 1], res[2 * k])
                     for k in range(rounds))]
        stack.note(f"(confirm, release) per round: {outcomes}")
        booked = dict(self.S.sql(f"select seat_id, booking_id from booking_items "
                                 f"where event_id = '{ev}'"))
        problems = []
        for k, h in enumerate(holds):
            pair = res[2 * k:2 * k + 2]
            conf, rel = pair if k % 2 else pair[::-1]
            seat = h["seats"][0]
            # A released hold is gone: its confirm may answer 404 unknown_hold or 409.
            if conf.status not in (201, 404, 409) or rel.status not in (204, 404, 409):
                problems.append(f"{seat}: unexpected confirm {conf!r} / release {rel!r}")
            if conf.status == 201 and rel.status == 204:
                # Release and convert act on the hold atomically: it ends one way only.
                problems.append(f"{seat}: both confirmed and released: {conf!r} {rel!r}")
            if (conf.status == 201) != (seat in booked):
                problems.append(f"{seat}: confirm {conf!r} but booked={seat in booked}")
            p = self.c.post(f"/v1/events/{ev}/holds", {"seats": [seat]}, token=probe)
            if p.status != (409 if seat in booked else 201):
                problems.append(f"{seat}: booked={seat in booked} but a new hold got {p!r}")
        self.assertEqual(problems, [], "\n".join(problems))

    def test_ga_multi_unit_burst_never_oversells(self):
        ev = self.new_event(pools=[{"id": "floor", "capacity": 100, "price": 10}],
                            max_per_buyer=0)
        toks = self.S.tokens(ev, "trio", 50)
        res = self.S.burst([self.S.req("POST", f"/v1/events/{ev}/holds", token=t,
                                       body={"pool": "floor", "quantity": 3}) for t in toks])
        summary = summarize(res)
        stack.note(summary)
        won = [r for r in res if r.status == 201]
        self.assertEqual(len(won), 33, f"33 × 3 units of 100: {summary}")
        self.assertEqual(sum(r.json["quantity"] for r in won), 99)
        lost = [r for r in res if r.status == 409]
        self.assertEqual(len(lost), 17, summary)
        for r in lost:
            self.assertEqual((r.err, r.json.get("available")), ("insufficient", 1), repr(r))
        self.wait_json(f"/v1/events/{ev}/availability",
                       lambda d: pool_available(d, "floor") == 1, what="floor available 1")
