"""The reserve's Lua scripts (reserve/lua/*.lua, each run with prelude.lua in front, as
rsv_lua.c loads them) called directly against a real Redis of their own: hold_seats,
hold_pool, hold_best, get, extend, release, convert, unconvert, avail, seed, stock.

Keys live under a prefix of the test's own ('t:{<event>}:' instead of 'os:{<event>}:'),
so a key a script built itself, outside KEYS, shows up as a stranger (every
key a script touches is declared). Expiry is driven by 1 ms TTLs and a short wait, never
by a sweeper. One redis-server for the module, one event per test."""

import os
import time
import unittest
import uuid

import stack

SOURCE = stack._env_dir("ONSALE_SOURCE_DIR",
                        os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
LUA = os.path.join(SOURCE, "reserve", "lua")
NAMES = ("hold_seats", "hold_pool", "hold_best", "get", "extend", "release", "convert", "unconvert",
         "avail", "seed", "stock")
_REDIS = {}


def setUpModule():
    _REDIS["r"] = stack.private_redis("onsale-rsvlua-")


def script(name):
    return stack.lua_script(LUA, name)


SCRIPTS = {n: script(n) for n in NAMES}


def s(v):
    if isinstance(v, list):
        return [s(x) for x in v]
    return v.decode() if isinstance(v, bytes) else v


class Event:
    """One event's keys (rsv_rediskeys.h layout under the test prefix)."""

    def __init__(self, r):
        self.r = r
        self.ev = uuid.uuid4().hex[:12]
        self.p = f"t:{{{self.ev}}}:"
        self.n = 0
        r("SET", self.k("seed"), "1")

    def k(self, kind, ident=""):
        return f"{self.p}{kind}{ident}"

    def hold_id(self):
        self.n += 1
        return f"{self.n:032x}.{self.ev}"

    def run(self, name, keys, *args):
        return s(self.r("EVAL", SCRIPTS[name], len(keys), *keys, *args))

    # taking holds
    # record: None = the token was verified; else the token record's id, which must exist
    def seats(self, buyer, seats, ttl=60000, limit=0, amount=None, cap=600000, idem="",
              req="", record=None):
        hid = self.hold_id()
        keys = [self.k("seed"), self.k("h:", hid), self.k("b:", buyer), self.k("active"),
                self.k("ik:", idem)]
        keys += [self.k("s:", x) for x in seats]
        rep = self.run("hold_seats", keys, hid, buyer, ttl, cap, limit, ",".join(seats),
                       amount if amount is not None else 100 * len(seats), 3600000, req,
                       record or "")
        return hid, rep

    # best available: cands are (seat, row, position, rank, price) in place order; bound
    # (ranks added up, 1-based first seat) makes them a window
    def best(self, buyer, cands, want, split=False, ttl=60000, limit=0, idem="", req="",
             record=None, bound=("", "")):
        hid = self.hold_id()
        keys = [self.k("seed"), self.k("h:", hid), self.k("b:", buyer), self.k("active"),
                self.k("ik:", idem)] + [self.k("s:", c[0]) for c in cands]
        places = "".join("%06d%06d%010d%012d" % c[1:] for c in cands)
        rep = self.run("hold_best", keys, hid, buyer, ttl, 600000, limit, want,
                       "1" if split else "0", 3600000, req, record or "", places, *bound)
        return hid, rep

    def pool(self, buyer, pool, qty, ttl=60000, limit=0, cap=600000, idem="", req="",
             record=None):
        hid = self.hold_id()
        keys = [self.k("seed"), self.k("h:", hid), self.k("b:", buyer), self.k("p:", pool),
                self.k("pu:", pool), self.k("active"), self.k("ik:", idem)]
        rep = self.run("hold_pool", keys, hid, buyer, ttl, cap, limit, pool, qty, 50 * qty,
                       3600000, req, record or "")
        return hid, rep

    # acting on a hold: read it first, as rsv_hold_act does
    def act(self, name, hid, buyer, *extra, seats=None, pool=None):
        if seats is None and pool is None:
            g = self.run("get", [self.k("h:", hid)], hid, buyer)
            seats = g[2].split(",") if len(g) > 2 and g[2] else []
            pool = g[3] if len(g) > 3 else ""
        seats = seats or []
        pool = pool or ""
        keys = [self.k("h:", hid), self.k("b:", buyer), self.k("active"), self.k("p:", pool),
                self.k("pu:", pool), self.k("pn:", pool)] + [self.k("s:", x) for x in seats]
        return self.run(name, keys, hid, buyer, ",".join(seats), pool, *extra)

    def get(self, hid, buyer):
        return self.run("get", [self.k("h:", hid)], hid, buyer)

    def avail(self, pool):
        return self.run("avail", [self.k("p:", pool), self.k("pu:", pool)])

    def active(self, buyer):
        v = self.r("ZSCORE", self.k("active"), buyer)
        return None if v is None else float(s(v))


class LuaCase(unittest.TestCase):
    def setUp(self):
        self.r = _REDIS["r"]
        self.e = Event(self.r)

    def tearDown(self):
        # Nothing outside the declared keys (all under the test's prefix).
        strangers = [s(k) for k in self.r.scan_keys("*") if not s(k).startswith("t:{")]
        self.assertEqual(strangers, [], "a script built a key outside KEYS")


class TokenRecords(LuaCase):
    """A hold on a token the reserve did not verify needs the gateway's record of it."""

    def test_without_the_record_nothing_is_held(self):
        e = self.e
        self.r("SET", e.k("p:", "ga"), "10")
        _, rep = e.seats("u1", ["A-1"], record="ab" * 32)
        self.assertEqual(rep, ["UNVERIFIED"])
        _, rep = e.pool("u1", "ga", 2, record="ab" * 32)
        self.assertEqual(rep, ["UNVERIFIED"])
        # nothing was taken or written: the seat, the pool, the buyer, the active set
        self.assertEqual(self.r("EXISTS", e.k("s:", "A-1")), 0)
        self.assertEqual(s(self.r("GET", e.k("p:", "ga"))), "10")
        self.assertEqual(self.r("EXISTS", e.k("b:", "u1")), 0)
        self.assertIsNone(e.active("u1"))
        # an Idempotency-Key's earlier answer is not revealed either
        _, rep = e.seats("u2", ["A-2"], idem="k", req="h")
        self.assertEqual(rep[0], "OK")
        _, rep = e.seats("u2", ["A-2"], idem="k", req="h", record="cd" * 32)
        self.assertEqual(rep, ["UNVERIFIED"])

    def test_with_the_record_it_holds(self):
        e = self.e
        self.r("SET", e.k("p:", "ga"), "10")
        self.r("SET", e.k("tk:", "ef" * 32), "1", "PX", 60000)
        _, rep = e.seats("u1", ["A-1"], record="ef" * 32)
        self.assertEqual(rep[0], "OK")
        _, rep = e.pool("u1", "ga", 2, record="ef" * 32)
        self.assertEqual(rep[0], "OK")
        # a record of another token does not stand for this one
        _, rep = e.seats("u1", ["A-3"], record="01" * 32)
        self.assertEqual(rep, ["UNVERIFIED"])

    def test_an_expired_record_is_no_record(self):
        e = self.e
        self.r("SET", e.k("tk:", "aa" * 32), "1", "PX", 1)
        time.sleep(0.01)
        _, rep = e.seats("u1", ["A-1"], record="aa" * 32)
        self.assertEqual(rep, ["UNVERIFIED"])


class Holds(LuaCase):
    def test_seats_all_or_nothing_and_limit(self):
        e = self.e
        _, rep = e.seats("u1", ["A-1", "A-2"])
        self.assertEqual(rep[0], "OK")
        _, rep = e.seats("u2", ["A-3", "A-2", "A-1"])
        self.assertEqual(rep, ["TAKEN", 2, 3])
        self.assertIsNone(self.r("GET", e.k("s:", "A-3")), "nothing taken on a conflict")
        _, rep = e.seats("u1", ["A-4", "A-5"], limit=3)
        self.assertEqual(rep, ["LIMIT", 2])
        self.r("DEL", e.k("seed"))
        _, rep = e.seats("u3", ["A-9"])
        self.assertEqual(rep, ["NOSEED"])

    def test_pool_soldout_insufficient_limit(self):
        e = self.e
        self.r("SET", e.k("p:", "fl"), 5)
        _, rep = e.pool("u1", "fl", 3)
        self.assertEqual(rep[0], "OK")
        self.assertEqual(rep[2], 2)
        _, rep = e.pool("u2", "fl", 3)
        self.assertEqual(rep, ["INSUFFICIENT", 2])
        _, rep = e.pool("u1", "fl", 2, limit=4)
        self.assertEqual(rep, ["LIMIT", 3])
        _, rep = e.pool("u2", "fl", 2)
        self.assertEqual(rep[0], "OK")
        _, rep = e.pool("u3", "fl", 1)
        self.assertEqual(rep, ["SOLDOUT"])

    def test_pool_is_exact_whatever_the_expiry_backlog(self):
        """Regression: expired pool holds were reclaimed 500 per call, so
        a wave of expiries answered sold_out / under-counted while units existed."""
        e = self.e
        self.r("SET", e.k("p:", "fl"), 1200)
        for i in range(1200):
            _, rep = e.pool(f"b{i}", "fl", 1)
            self.assertEqual(rep[0], "OK", i)
        self.assertEqual(self.r("GET", e.k("p:", "fl")), b"0")
        # A wave of expiries: every held unit's expiry moves to the past at once.
        self.r("ZUNIONSTORE", e.k("pu:", "fl"), 1, e.k("pu:", "fl"), "WEIGHTS", 0)
        self.assertEqual(e.avail("fl"), [1200, 0], "every expired unit counts at read time")
        _, rep = e.pool("big", "fl", 1000)
        self.assertEqual(rep[0], "OK", rep)
        self.assertEqual(rep[2], 200)
        self.assertEqual(e.avail("fl"), [200, 1000])
        _, rep = e.pool("big2", "fl", 201)
        self.assertEqual(rep, ["INSUFFICIENT", 200])
        _, rep = e.pool("big2", "fl", 200)
        self.assertEqual(rep[0], "OK")
        _, rep = e.pool("big3", "fl", 1)
        self.assertEqual(rep, ["SOLDOUT"])


class Idempotent(LuaCase):
    def test_same_key_and_body_replays_the_hold_other_body_mismatches(self):
        """A create that ran in Redis but whose answer was lost is
        retried with the same key: the first hold comes back, nothing new is taken."""
        e = self.e
        h1, rep = e.seats("u1", ["A-1"], idem="k1", req="r1")
        self.assertEqual(rep[0], "OK")
        h2, rep = e.seats("u1", ["A-1"], idem="k1", req="r1")
        self.assertEqual(rep, ["REPLAY", h1])
        self.assertEqual(self.r("EXISTS", e.k("h:", h2)), 0)
        _, rep = e.seats("u1", ["A-2"], idem="k1", req="r2")
        self.assertEqual(rep, ["MISMATCH"])
        self.assertIsNone(self.r("GET", e.k("s:", "A-2")))
        self.r("SET", e.k("p:", "fl"), 10)
        p1, rep = e.pool("u1", "fl", 2, idem="k2", req="r3")
        self.assertEqual(rep[0], "OK")
        _, rep = e.pool("u1", "fl", 2, idem="k2", req="r3")
        self.assertEqual(rep, ["REPLAY", p1])
        self.assertEqual(e.avail("fl"), [8, 2])
        self.assertGreater(self.r("PTTL", e.k("ik:", "k2")), 60000)
        # Without a key every request is its own.
        _, rep = e.seats("u1", ["A-3"])
        self.assertEqual(rep[0], "OK")
        self.assertEqual(self.r("EXISTS", e.k("ik:")), 0)


class Acting(LuaCase):
    def test_extend_lengthens_nothing_when_a_seat_is_lost(self):
        """Regression: extend lengthened some seats, then answered
        hold_expired without undoing them."""
        e = self.e
        hid, rep = e.seats("u1", ["A-1", "A-2", "A-3"], ttl=30000)
        self.assertEqual(rep[0], "OK")
        before = [self.r("PTTL", e.k("s:", x)) for x in ("A-1", "A-2")]
        self.r("SET", e.k("s:", "A-3"), "someone-else")  # the third seat is not ours now
        rep = e.act("extend", hid, "u1", 300000, 3600000)
        self.assertEqual(rep[0], "EXPIRED")
        after = [self.r("PTTL", e.k("s:", x)) for x in ("A-1", "A-2")]
        for b, a in zip(before, after):
            self.assertLessEqual(a, b, "a seat was lengthened by a failed extend")

    def test_extend_pool_and_cap(self):
        e = self.e
        self.r("SET", e.k("p:", "fl"), 10)
        hid, rep = e.pool("u1", "fl", 2, ttl=1000, cap=5000)
        rep = e.act("extend", hid, "u1", 60000, 3600000)
        self.assertEqual(rep[0], "OK")
        self.assertEqual(int(rep[1]), int(e.get(hid, "u1")[6]), "never past the cap")
        scores = s(self.r("ZRANGE", e.k("pu:", "fl"), 0, -1, "WITHSCORES"))
        self.assertEqual(len(scores), 4)
        self.assertEqual({int(float(x)) for x in scores[1::2]}, {int(rep[1])})

    def test_release_and_convert_keep_the_buyer_active_while_another_hold_lives(self):
        """Regression: release/convert took the buyer out of the active
        set while another hold of theirs lived (max_active undercounted)."""
        e = self.e
        h1, r1 = e.seats("u1", ["A-1"], ttl=30000)
        h2, r2 = e.seats("u1", ["A-2"], ttl=60000)
        h3, r3 = e.seats("u1", ["A-3"], ttl=45000)
        self.assertEqual(e.active("u1"), int(r2[1]))
        self.assertEqual(e.act("release", h2, "u1"), ["OK"])
        self.assertEqual(e.active("u1"), int(r3[1]), "active until the latest live hold ends")
        rep = e.act("convert", h3, "u1", "co_1", 86400000, "100")
        self.assertEqual(rep[0], "OK")
        self.assertEqual(e.active("u1"), int(r1[1]))
        self.assertEqual(e.act("release", h1, "u1"), ["OK"])
        self.assertIsNone(e.active("u1"), "no live hold: no longer active")
        self.assertIsNone(self.r("GET", e.k("s:", "A-1")))

    def test_release_of_a_pool_hold_returns_its_units_once(self):
        e = self.e
        self.r("SET", e.k("p:", "fl"), 4)
        hid, _ = e.pool("u1", "fl", 3)
        self.assertEqual(e.avail("fl"), [1, 3])
        self.assertEqual(e.act("release", hid, "u1"), ["OK"])
        self.assertEqual(e.act("release", hid, "u1"), ["GONE"])
        self.assertEqual(e.avail("fl"), [4, 0])

    def test_owner_and_stale_keys_checked(self):
        e = self.e
        hid, _ = e.seats("u1", ["A-1", "A-2"])
        self.assertEqual(e.act("release", hid, "intruder"), ["NOTFOUND"])
        self.assertEqual(e.act("extend", hid, "u1", 1000, 1000, seats=["A-1"]), ["STALE"])
        self.assertEqual(self.r("GET", e.k("s:", "A-1")), hid.encode())

    def test_convert_rechecks_amount_expiry_and_is_idempotent(self):
        e = self.e
        hid, _ = e.seats("u1", ["A-1", "A-2"], amount=240)
        self.assertEqual(e.act("convert", hid, "u1", "co_1", 86400000, "239")[0], "AMOUNT")
        rep = e.act("convert", hid, "u1", "co_1", 86400000, "240")
        self.assertEqual(rep[0], "OK")
        self.assertEqual(self.r("GET", e.k("s:", "A-1")), b"sold:co_1")
        self.assertEqual(e.act("convert", hid, "u1", "co_1", 86400000, "240")[0], "OK")
        self.assertEqual(e.act("convert", hid, "u1", "co_2", 86400000, "240")[0], "CONVERTED")
        late, _ = e.seats("u2", ["B-1"], ttl=1)
        time.sleep(0.01)
        self.assertEqual(e.act("convert", late, "u2", "co_3", 86400000, "100")[0], "EXPIRED")
        self.assertEqual(e.get(late, "u2")[0], "EXPIRED")

    def test_amounts_compare_exactly_above_2_to_the_53(self):
        e = self.e
        big = 2 ** 53 + 1
        hid, _ = e.seats("u1", ["A-1"], amount=big)
        self.assertEqual(e.act("convert", hid, "u1", "co", 86400000, str(big - 1))[0], "AMOUNT")
        self.assertEqual(e.act("convert", hid, "u1", "co", 86400000, str(big))[0], "OK")


class GiveBack(LuaCase):
    def test_refused_booking_gives_back_free_seats_and_the_buyer_limit(self):
        """Regression: Redis converted, Postgres refused (stale
        restore): the sold marks and the buyer-limit entry stayed consumed forever."""
        e = self.e
        hid, _ = e.seats("u1", ["A-1", "A-2"])
        self.assertEqual(e.act("convert", hid, "u1", "co_9", 86400000, "200")[0], "OK")
        self.assertEqual(len(self.r("ZRANGE", e.k("b:", "u1"), 0, -1)), 1)
        # Postgres: A-2 is booked by someone else, A-1 by nobody.
        rep = e.act("unconvert", hid, "u1", "co_9", "A-1", "0")
        self.assertEqual(rep, ["OK", 1, 0])
        self.assertIsNone(self.r("GET", e.k("s:", "A-1")), "the free seat is free again")
        self.assertEqual(self.r("GET", e.k("s:", "A-2")), b"sold:co_9", "the booked one stays")
        self.assertEqual(self.r("ZRANGE", e.k("b:", "u1"), 0, -1), [], "limit entry back")
        self.assertEqual(e.act("unconvert", hid, "u1", "co_9", "A-1", "0"), ["NOOP"])
        self.assertEqual(e.get(hid, "u1")[0], "EXPIRED")
        _, rep = e.seats("u2", ["A-1"])
        self.assertEqual(rep[0], "OK")

    def test_refused_pool_booking_returns_its_units(self):
        e = self.e
        self.r("SET", e.k("p:", "fl"), 5)
        hid, _ = e.pool("u1", "fl", 3)
        rep = e.act("convert", hid, "u1", "co_5", 86400000, "150")
        self.assertEqual(rep[0], "OK")
        self.assertEqual(e.avail("fl"), [2, 0])
        self.assertEqual(e.act("unconvert", hid, "u1", "co_5", "", "3"), ["OK", 0, 3])
        self.assertEqual(e.act("unconvert", hid, "u1", "co_5", "", "3"), ["NOOP"])
        self.assertEqual(e.avail("fl"), [5, 0])
        self.assertEqual(e.act("unconvert", hid, "u1", "co_other", "", "3"), ["NOOP"])


class Seed(LuaCase):
    def test_seed_loads_pools_sold_seats_and_buyers_once(self):
        e = self.e
        self.r("DEL", e.k("seed"))
        self.r("ZADD", e.k("pu:", "fl"), 1, "stale#1")
        keys = [e.k("seed"), e.k("p:", "fl"), e.k("pn:", "fl"), e.k("pu:", "fl"),
                e.k("s:", "A-1"), e.k("b:", "u1"), e.k("b:", "u2")]
        args = [1, 7, 3, 1, "bk_1", 2, "bk_2", 1]
        self.assertEqual(e.run("seed", keys, *args), 1)
        self.assertEqual(self.r("GET", e.k("p:", "fl")), b"7")
        self.assertEqual(self.r("GET", e.k("pn:", "fl")), b"3")
        self.assertEqual(self.r("EXISTS", e.k("pu:", "fl")), 0)
        self.assertEqual(self.r("GET", e.k("s:", "A-1")), b"sold")
        self.assertEqual(s(self.r("ZRANGE", e.k("b:", "u1"), 0, -1)), ["2:bk_1"])
        self.assertEqual(s(self.r("ZRANGE", e.k("b:", "u2"), 0, -1)), ["1:bk_2"])
        self.assertEqual(e.run("seed", keys, *args), 0)


class Stock(LuaCase):
    def test_stock_writes_the_counts_at_redis_time_and_expires(self):
        e = self.e
        before = self.redis_ms()
        at = e.run("stock", [e.k("stock")], 7, 3, 10, 4, 5000)
        self.assertTrue(before <= at <= self.redis_ms(), (before, at))
        got = dict(zip(*[iter(s(self.r("HGETALL", e.k("stock"))))] * 2))
        self.assertEqual(got, {"left": "7", "held": "3", "total": "10", "version": "4",
                               "at": str(at)})
        self.assertTrue(4000 < self.r("PTTL", e.k("stock")) <= 5000)
        # written again: the new counts, a later at, the life renewed
        self.r("PEXPIRE", e.k("stock"), 100)
        at2 = e.run("stock", [e.k("stock")], 10, 0, 10, 5, 5000)
        self.assertGreaterEqual(at2, at)
        self.assertEqual(s(self.r("HMGET", e.k("stock"), "left", "held", "version")),
                         ["10", "0", "5"])
        self.assertGreater(self.r("PTTL", e.k("stock")), 4000)

    def redis_ms(self):
        sec, usec = self.r("TIME")
        return int(sec) * 1000 + int(usec) // 1000


class Best(LuaCase):
    ROW = [("B1", 1, 1, 3, 100), ("B2", 1, 2, 1, 200), ("B3", 1, 3, 1, 300), ("B4", 1, 4, 3, 400),
           ("C1", 2, 1, 5, 100)]

    def test_block_by_rank_held_like_named_seats_and_expired_at_read_time(self):
        e = self.e
        hid, rep = e.best("u1", self.ROW, 2, ttl=1)
        self.assertEqual((rep[0], rep[2], rep[3]), ("OK", "B2,B3", "500"))
        self.assertEqual(s(self.r("GET", e.k("s:", "B2"))), hid)
        g = e.get(hid, "u1")
        self.assertEqual((g[2], g[4], g[7]), ("B2,B3", "2", "500"))
        time.sleep(0.01)  # the 1 ms hold has expired: nothing swept, the seats read free
        _, rep = e.best("u2", self.ROW, 2)
        self.assertEqual(rep[2], "B2,B3")

    def test_no_block_split_and_release(self):
        e = self.e
        e.seats("u0", ["B2", "B4"])
        _, rep = e.best("u1", self.ROW, 2)
        self.assertEqual(rep, ["NOBLOCK", 3])
        hid, rep = e.best("u1", self.ROW, 2, split=True)
        # the best free seat (B3, rank 1), then the nearest: B1 (same row, 2 away) before C1
        self.assertEqual(rep[2], "B1,B3")
        self.assertEqual(e.act("release", hid, "u1")[0], "OK")
        _, rep = e.best("u2", self.ROW, 3)  # B1, B3, C1 free again: no three together
        self.assertEqual(rep, ["NOBLOCK", 3])
        _, rep = e.best("u2", self.ROW, 4, split=True)
        self.assertEqual(rep, ["INSUFFICIENT", 3])
        _, rep = e.best("u2", self.ROW[:1], 1)
        self.assertEqual(rep[2], "B1")
        _, rep = e.best("u3", self.ROW[:1], 1)
        self.assertEqual(rep, ["SOLDOUT"])

    def test_window_picks_within_its_bound_else_says_noblock_and_what_it_found(self):
        e = self.e
        # the best block, B2-B3 (ranks 1 + 1), within a window bounded by it
        _, rep = e.best("u1", self.ROW[:4], 2, bound=(2, 2))
        self.assertEqual((rep[0], rep[2], rep[3], rep[4]), ("OK", "B2,B3", "500", ""))
        # taken now: B3-B4 (4) is left, beyond a bound of 2; found taken: B2, B3
        _, rep = e.best("u2", self.ROW[:4], 2, bound=(2, 2))
        self.assertEqual(rep, ["NOBLOCK", 2, "2,3"])
        # one seat: B1 and B4 (rank 3 each) are beyond a bound of 2; within one of 3 at
        # B1, B1 (the first in place order on the tie)
        _, rep = e.best("u2", self.ROW[:4], 1, bound=(2, 4))
        self.assertEqual(rep, ["NOBLOCK", 2, "2,3"])
        _, rep = e.best("u2", self.ROW[:4], 1, bound=(3, 1))
        self.assertEqual((rep[0], rep[2], rep[4]), ("OK", "B1", "2,3"))
        # sold seats are told apart (negative); never seats apart, never INSUFFICIENT in
        # a window: the whole section may have more
        self.r("SET", e.k("s:", "C1"), "sold")
        _, rep = e.best("u3", self.ROW, 3, split=True, bound=(100, 5))
        self.assertEqual(rep, ["NOBLOCK", 1, "1,2,3,-5"])
        self.assertEqual(self.r("EXISTS", e.k("s:", "B4")), 0)

    def test_limit_and_token_record_checked_before_any_seat(self):
        e = self.e
        _, rep = e.best("u1", self.ROW, 3, limit=2)
        self.assertEqual(rep, ["LIMIT", 0])
        _, rep = e.best("u1", self.ROW, 1, record="ab" * 32)
        self.assertEqual(rep, ["UNVERIFIED"])
        for c in self.ROW:
            self.assertEqual(self.r("EXISTS", e.k("s:", c[0])), 0)
