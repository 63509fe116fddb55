"""The stock feed (docs/design.md, "The stock feed"): the reserve publishes what is still
buyable of each live event in the hash os:{<event>}:stock (left, held, total, version,
at), exact at read time like the availability snapshot, refreshed every
stock_interval_ms while the event has requests or units held, expiring when the feed
stops; one rebuild per interval whatever the workers and reserves (the lock
os:{<event>}:stockl); the gateway's Redis user may read the hash and nothing more.

The reserve of this module runs with stock_idle_s = 2, so that an event with no request
stays fed only because units are held (and a hold of 4 s outlives its requests)."""

import time
import uuid

import stack
from stack import metric_sum

IDLE_S = 2
INTERVAL_MS = 500  # the default stock_interval_ms
TTL_MS = max(5000, 10 * INTERVAL_MS)
ENV = {"ONSALE_RESERVE_STOCK_IDLE_S": str(IDLE_S)}
ROUNDS = "onsale_reserve_stock_rounds_total"


def setUpModule():
    with stack.env_set(ENV):
        stack.module_stack("stock")


SEATS = [{"id": f"A-{i}", "section": "A", "price": 1000} for i in range(1, 5)]
POOLS = [{"id": "floor", "capacity": 6, "price": 500}]
TOTAL = len(SEATS) + 6


def stock_key(ev):
    return f"os:{{{ev}}}:stock"


class Feed(stack.ReserveTestCase):
    def event(self, **spec):
        """A new event of 4 seats and a 6-unit pool; returns (id, catalogue version)."""
        ev = stack.new_id()
        spec = {"seats": SEATS, "pools": POOLS, "max_per_buyer": 10, **spec}
        r = self.S.create_event(ev, **spec)
        self.assertEqual(r.status, 201, repr(r))
        return ev, r.json["version"]

    def redis_ms(self):
        sec, usec = self.S.redis("TIME")
        return int(sec) * 1000 + int(usec) // 1000

    def stock(self, ev):
        """The hash as {field: int}, or None when there is none."""
        flat = self.S.redis("HGETALL", stock_key(ev)) or []
        if not flat:
            return None
        return {f.decode(): int(v) for f, v in zip(flat[::2], flat[1::2])}

    def wait_stock(self, ev, left, held, version, timeout=10):
        """Polls until the hash says left and held, with the event's total and version,
        written within the last two intervals (a round after the change, not before)."""
        want = {"left": left, "held": held, "total": TOTAL, "version": version}
        deadline = time.monotonic() + timeout
        while True:
            d = self.stock(ev)
            age = self.redis_ms() - d["at"] if d else None
            if d and {k: d.get(k) for k in want} == want and 0 <= age <= 2 * INTERVAL_MS + 500:
                return d
            if time.monotonic() >= deadline:
                self.fail(f"{stock_key(ev)} is not {want}, fresh, after {timeout} s: last "
                          f"{d} ({age} ms old)")
            time.sleep(0.05)

    def tokens(self, ev, n):
        return [self.S.token(ev, f"fan-{uuid.uuid4().hex[:8]}") for _ in range(n)]

    def test_holds_and_releases_move_left_and_held(self):
        ev, version = self.event()
        t1, t2, t3 = self.tokens(ev, 3)
        h1 = self.hold(ev, t1, seats=["A-1", "A-2"]).json["hold_id"]
        h2 = self.hold(ev, t2, pool="floor", quantity=3).json["hold_id"]
        d = self.wait_stock(ev, left=TOTAL - 5, held=5, version=version)
        pttl = self.S.redis("PTTL", stock_key(ev))
        self.assertTrue(0 < pttl <= TTL_MS, f"PTTL {pttl} of {d}: the hash must expire")

        # everything held: nothing left
        h3 = self.hold(ev, t3, seats=["A-3", "A-4"]).json["hold_id"]
        self.hold(ev, t3, pool="floor", quantity=3)
        self.wait_stock(ev, left=0, held=TOTAL, version=version)

        # a release gives its units back
        self.assertStatus(self.c.delete(f"/v1/holds/{h1}", token=t1), 204)
        self.wait_stock(ev, left=2, held=TOTAL - 2, version=version)
        self.assertStatus(self.c.delete(f"/v1/holds/{h2}", token=t2), 204)
        self.assertStatus(self.c.delete(f"/v1/holds/{h3}", token=t3), 204)
        self.wait_stock(ev, left=7, held=3, version=version)

    def test_an_event_without_requests_is_not_published(self):
        quiet, _ = self.event()
        busy, version = self.event()
        self.hold(busy, self.tokens(busy, 1)[0], seats=["A-1"])
        first = self.wait_stock(busy, left=TOTAL - 1, held=1, version=version)
        # two rounds later the quiet event still has no hash
        stack.wait_for(lambda: (self.stock(busy) or {}).get("at", 0) > first["at"] + INTERVAL_MS,
                       10, what=f"two rounds of {busy}'s feed")
        self.assertIsNone(self.stock(quiet), "an event nobody asked for was published")
        self.assertEqual(self.S.redis("EXISTS", f"os:{{{quiet}}}:stockl"), 0)

    def test_expired_holds_come_back_and_an_idle_feed_expires(self):
        ev, version = self.event(hold_ttl_seconds=4, checkout_extension_seconds=60,
                                 max_hold_seconds=600)
        t1, t2 = self.tokens(ev, 2)
        h = self.hold(ev, t1, seats=["A-1", "A-2"])
        self.hold(ev, t2, pool="floor", quantity=2)
        self.wait_stock(ev, left=TOTAL - 4, held=4, version=version)
        # No request for this event from here on. After IDLE_S only the held units keep
        # its feed going; the holds expire at read time and the feed sees them back.
        expires = h.json["expires_at"]
        d = self.wait_stock(ev, left=TOTAL, held=0, version=version, timeout=4 + IDLE_S + 6)
        self.assertEqual(self.S.sql_value(f"select count(*) from bookings where event_id = '{ev}'"),
                         "0")
        # Now idle and nothing held: the feed stops and the hash dies with its PEXPIRE.
        stack.wait_for(lambda: self.stock(ev) is None, TTL_MS / 1000 + INTERVAL_MS / 1000 + 5,
                       what=f"{stock_key(ev)} gone after the feed stopped (last {d}, hold "
                       f"expired {expires})")

    def test_booking_everything_leaves_nothing(self):
        ev, version = self.event()
        t1, t2 = self.tokens(ev, 2)
        seats = self.hold(ev, t1, seats=["A-1", "A-2", "A-3", "A-4"])
        pool = self.hold(ev, t2, pool="floor", quantity=6)
        self.wait_stock(ev, left=0, held=TOTAL, version=version)
        for h, t in ((seats, t1), (pool, t2)):
            r = self.confirm(h.json["hold_id"], t, h.json["amount"])
            self.assertStatus(r, 201, msg="confirm:")
        self.wait_stock(ev, left=0, held=0, version=version)

    def test_workers_and_reserves_publish_one_truth(self):
        """Every worker (and both reserves of the cluster topology) sees requests for the
        event; each round's hash is the truth, and the interval's lock turns the other
        workers' rounds into "elsewhere"."""
        ev, version = self.event()
        before = self.S.metrics()
        toks = self.tokens(ev, 4)
        for i, t in enumerate(toks):  # a connection each: they land on every worker
            c = self.S.client()
            try:
                r = c.post(f"/v1/events/{ev}/holds", {"pool": "floor", "quantity": 1}, token=t)
                self.assertStatus(r, 201, msg=f"hold {i}:")
            finally:
                c.close()
        for _ in range(16):
            c = self.S.client()
            try:
                self.assertStatus(c.get(f"/v1/events/{ev}/availability"), 200)
            finally:
                c.close()
        last = 0
        for _ in range(4):  # four rounds, each the truth
            d = stack.wait_for(lambda: (s := self.stock(ev)) and s["at"] > last and s, 10,
                               what=f"a round of {ev}'s feed after at={last}")
            self.assertEqual((d["left"], d["held"], d["total"], d["version"]),
                             (TOTAL - 4, 4, TOTAL, version), repr(d))
            last = d["at"]
        after = self.S.metrics()
        grew = {o: metric_sum(after, ROUNDS, outcome=o) - metric_sum(before, ROUNDS, outcome=o)
                for o in ("published", "elsewhere", "failed")}
        self.assertGreater(grew["published"], 0, grew)
        self.assertGreater(grew["elsewhere"], 0,
                           f"{grew}: no worker found the interval's lock taken")


class GatewayUser(stack.ReserveTestCase):
    """The gateway's Redis user reads the stock (in its tick script too, without declaring
    the key) and cannot write it: the inventory stays the reserve's."""

    def test_the_gateway_reads_the_stock_and_cannot_write_it(self):
        ev = stack.new_id()
        self.assertEqual(self.S.create_event(ev, seats=SEATS, pools=POOLS).status, 201)
        self.hold(ev, self.S.token(ev, "gw-reader"), seats=["A-1"])
        key = stock_key(ev)
        stack.wait_for(lambda: self.S.redis("EXISTS", key) == 1, 10, what=f"{key} published")
        r = stack.redis_as(self.S, "gateway")
        self.addCleanup(r.close)
        flat = r("HGETALL", key)
        got = {f.decode(): int(v) for f, v in zip(flat[::2], flat[1::2])}
        self.assertEqual(sorted(got), ["at", "held", "left", "total", "version"])
        self.assertEqual((got["held"], got["total"]), (1, TOTAL), repr(got))
        # as its tick script reads it: a waiting-room key declared, the stock not
        room = f"os:{{{ev}}}:q:cfg"
        self.assertEqual(r("EVAL", f"return redis.call('HGET', '{key}', 'total')", "1", room),
                         str(TOTAL).encode())
        for cmd in (("HSET", key, "left", "99"), ("DEL", key), ("PEXPIRE", key, "1"),
                    ("EVAL", f"return redis.call('HSET', '{key}', 'left', '99')", "1", room),
                    ("SET", f"os:{{{ev}}}:stockl", "1")):
            with self.assertRaisesRegex(RuntimeError, "NOPERM|user executing the script can't",
                                        msg=f"{cmd!r} was allowed"):
                r(*cmd)
        self.assertEqual(int(self.S.redis("HGET", key, "total")), TOTAL)
