"""The queue itself, with two gateways sharing one Redis: concurrent joins get unique,
gap-free numbers; admission after the opening is FIFO; the pre-queue is put in a
uniformly random order at the opening (a permutation, and not the arrival order), or
kept in arrival order with mode fifo."""

import time

import gwstack
import stack
from gwstack import ticket_number


def setUpModule():
    gwstack.module_stack("gw-queue", gateways=2)


def spearman(xs, ys):
    n = len(xs)

    def ranks(v):
        order = sorted(range(n), key=lambda i: v[i])
        r = [0] * n
        for k, i in enumerate(order):
            r[i] = k
        return r
    rx, ry = ranks(xs), ranks(ys)
    d2 = sum((a - b) ** 2 for a, b in zip(rx, ry))
    return 1 - 6 * d2 / (n * (n * n - 1))


class Joins(gwstack.GatewayTestCase):
    def test_concurrent_joins_unique_and_gap_free(self):
        ev = self.new_room(rate_per_minute=1, paused=True)
        n = 600
        tickets = self.burst_join(ev, n)
        nums = sorted(ticket_number(t) for t in tickets)
        self.assertEqual(len(set(nums)), n, "duplicate queue numbers")
        self.assertEqual(nums, list(range(1, n + 1)), "numbers are not 1..n without gaps")
        # and the positions the two gateways report agree with the numbers
        g2 = self.GS.gateways[1].client()
        try:
            for t in tickets[:20]:
                r = self.status(ev, t, client=g2)
                self.assertStatus(r, 200)
                self.assertEqual(r.json["position"], ticket_number(t))
        finally:
            g2.close()

    def test_fifo_admission_order_after_opening(self):
        ev = self.new_room(rate_per_minute=300, paused=True, noshow_grace_seconds=3600)
        tickets = [self.join(ev).json["ticket"] for _ in range(25)]
        self.assertEqual([ticket_number(t) for t in tickets], list(range(1, 26)))
        self.patch(ev, paused=False)
        clients = [g.client() for g in self.GS.gateways]
        admitted = set()
        deadline = time.monotonic() + 30
        try:
            while len(admitted) < 25 and time.monotonic() < deadline:
                for i, t in enumerate(tickets):
                    if i in admitted:
                        continue
                    r = self.status(ev, t, client=clients[i % 2])
                    self.assertStatus(r, 200)
                    if r.json["state"] == "admitted":
                        admitted.add(i)
                # admitted is always a prefix of the join order
                self.assertEqual(admitted, set(range(len(admitted))),
                                 f"admission out of order: {sorted(admitted)}")
                time.sleep(0.05)
        finally:
            for c in clients:
                c.close()
        self.assertEqual(len(admitted), 25)


class PreQueue(gwstack.GatewayTestCase):
    N = 200

    def prequeue_numbers(self, mode):
        opens = time.time() + 4
        ev = self.new_room(rate_per_minute=60, mode=mode, opens_at=gwstack.rfc3339(opens),
                           prequeue_at=gwstack.rfc3339(time.time() - 1))
        tickets = []
        for i in range(self.N):  # sequential, so the arrival order is known
            r = self.join(ev, client=None)
            self.assertEqual(r.json["state"], "prequeue", repr(r))
            self.assertEqual(ticket_number(r.json["ticket"]), 0)
            self.assertIn("opens_at", r.json)
            tickets.append(r.json["ticket"])
        self.assertLess(time.time(), opens, "the pre-queue joins took too long")
        time.sleep(max(0, opens - time.time()) + 0.3)
        # after the opening a new arrival queues behind the whole pre-queue
        late = self.join(ev).json
        self.assertEqual(late["state"], "queued", late)
        self.assertEqual(ticket_number(late["ticket"]), self.N + 1)
        numbers = []
        clients = [g.client() for g in self.GS.gateways]
        try:
            for i, t in enumerate(tickets):
                r = self.status(ev, t, client=clients[i % 2])
                self.assertStatus(r, 200)
                self.assertIn(r.json["state"], ("queued", "admitted"), repr(r))
                num = ticket_number(r.json["ticket"])
                numbers.append(num)
                # the exchanged ticket is stable
                again = self.status(ev, r.json["ticket"], client=clients[(i + 1) % 2])
                self.assertEqual(ticket_number(again.json["ticket"]), num)
        finally:
            for c in clients:
                c.close()
        return numbers

    def test_prequeue_is_shuffled_at_opening(self):
        numbers = self.prequeue_numbers("random_at_open")
        self.assertEqual(sorted(numbers), list(range(1, self.N + 1)),
                         "the pre-queue order is not a permutation of the pre-queue")
        rho = spearman(list(range(self.N)), numbers)
        # For a uniform shuffle rho ~ N(0, 1/sqrt(N-1)) = N(0, 0.071): |rho| < 0.3 is > 4 sigma.
        self.assertLess(abs(rho), 0.3, f"pre-queue order correlates with arrival (rho={rho:.3f})")
        fixed = sum(1 for i, n in enumerate(numbers) if n == i + 1)
        self.assertLess(fixed, 10, f"{fixed} fans kept their arrival place")

    def test_fifo_mode_keeps_arrival_order(self):
        numbers = self.prequeue_numbers("fifo")
        self.assertEqual(numbers, list(range(1, self.N + 1)))


class BigPreQueue(gwstack.GatewayTestCase):
    """The pre-queue is bounded, and opening a room with 200,000 fans waiting
    never blocks Redis for 50 ms (Redis' own SLOWLOG and LATENCY monitor say so)."""

    FANS = 200_000
    REAL = 20

    def test_prequeue_is_bounded(self):
        ev = self.new_room(rate_per_minute=60, max_prequeue=3,
                           opens_at=gwstack.rfc3339(time.time() + 3600))
        for _ in range(3):
            self.assertEqual(self.join(ev).json["state"], "prequeue")
        r = self.join(ev, expect=None)
        self.assertStatus(r, 409, "prequeue_full")
        self.assertTrue(r.json["opens_at"].endswith("Z"), r.json)
        self.assertEqual(self.GS.redis("ZCARD", f"os:{{{ev}}}:q:pre"), 3)

    def test_opening_200k_prequeue_never_blocks_redis_50ms(self):
        opens = time.time() + 60
        ev = self.new_room(rate_per_minute=600, opens_at=gwstack.rfc3339(opens),
                           max_prequeue=self.FANS + self.REAL)
        real = [self.join(ev).json["ticket"] for _ in range(self.REAL)]
        # the rest of the crowd written as join.lua writes it (a random score per visitor),
        # 10,000 members per call of a small script
        key, batch = f"os:{{{ev}}}:q:pre", 10_000
        fill = ("local lo = tonumber(ARGV[1]) math.randomseed(lo + 1) "
                "for i = lo, lo + tonumber(ARGV[2]) - 1 do "
                "redis.call('ZADD', KEYS[1], math.random(2147483647) * 4194304, "
                "string.format('%032x', i)) end")
        for base in range(0, self.FANS, batch):
            self.GS.redis("EVAL", fill, 1, key, base, batch)
        self.assertEqual(self.GS.redis("ZCARD", key), self.FANS + self.REAL)
        r = self.GS.redis
        r("CONFIG", "SET", "slowlog-log-slower-than", "50000")
        r("CONFIG", "SET", "latency-monitor-threshold", "50")
        r("SLOWLOG", "RESET")
        r("LATENCY", "RESET")
        try:
            self.patch(ev, opens_at=gwstack.rfc3339(time.time()))
            stack.wait_for(lambda: self.GS.room_state(ev).get("opened") == 1, 5,
                           what="the opening")
            self.assertEqual(self.join(ev).json["position"], self.FANS + self.REAL + 1)
            numbers = set()
            for t in real:
                s = self.status(ev, t)
                self.assertStatus(s, 200)
                numbers.add(ticket_number(s.json["ticket"]))
            self.assertEqual(len(numbers), self.REAL)
            self.assertTrue(all(1 <= n <= self.FANS + self.REAL for n in numbers), numbers)
            self.assertStatus(self.GS.admin("DELETE", f"/admin/events/{ev}"), 200)
            slow = r("SLOWLOG", "GET", 20)
            latency = r("LATENCY", "LATEST")
        finally:
            r("CONFIG", "SET", "slowlog-log-slower-than", "10000")
            r("CONFIG", "SET", "latency-monitor-threshold", "0")
        self.assertEqual(slow, [], "a command blocked Redis for 50 ms or more")
        self.assertEqual(latency, [], "Redis' latency monitor saw a 50 ms event")
