"""The gateway's Lua scripts (gateway/lua/*.lua, each run with prelude.lua in front, as
gw_lua.c loads them) called directly against a real Redis of their own: join, lookup,
advance, admit, settings, delete. Time-dependent cases move the room's stored
timestamps instead of sleeping. One redis-server for the module, one room per test."""

import os
import time
import unittest
import uuid

import stack

SOURCE = stack._env_dir("ONSALE_SOURCE_DIR",
                        os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
LUA = os.path.join(SOURCE, "gateway", "lua")
KEY_SUFFIXES = ["q:cfg", "q:n", "q:st", "q:wb", "q:pre", "q:pl", "q:cb", "q:sb", "q:adm",
                "q:gone", "active"]  # gw_rediskeys.h order
_REDIS = {}


def setUpModule():
    _REDIS["r"] = stack.private_redis("onsale-gwlua-")


def script(name):
    return stack.lua_script(LUA, name)


SCRIPTS = {n: script(n) for n in ("join", "lookup", "advance", "admit", "settings", "delete")}


def s(v):
    return v.decode() if isinstance(v, bytes) else v


class Room:
    """One waiting room's keys (under a prefix of the test's own, so that a key a script
    built itself, outside KEYS, would show up as a stranger)."""

    def __init__(self, r, prefix="t"):
        self.r = r
        self.event = uuid.uuid4().hex[:12]
        self.keys = [f"{prefix}:{{{self.event}}}:{suf}" for suf in KEY_SUFFIXES]
        self.k = dict(zip(["cfg", "n", "st", "wb", "pre", "pl", "cb", "sb", "adm", "gone",
                           "active"], self.keys))

    def run(self, name, *args):
        return self.r("EVAL", SCRIPTS[name], len(self.keys), *self.keys, *args)

    def put(self, how="put", gen="12345", **fields):
        flat = []
        for k, v in fields.items():
            flat += [k, v]
        return self.run("settings", how, gen, *flat)

    def advance(self, *restore):
        out = self.run("advance", *(restore or ("", "0", "0", "0", "0")))
        if out[0] == 0:
            return None
        head = dict(zip(["ok", "now", "wm", "n", "claimed", "active", "noshows", "opened",
                         "prequeue", "restored", "left", "held"], out[:12]))
        cfg = {s(k): s(v) for k, v in zip(out[12::2], out[13::2])}
        return head, cfg

    def st(self):
        flat = self.r("HGETALL", self.k["st"]) or []
        return {s(k): float(v) for k, v in zip(flat[::2], flat[1::2])}

    def hset_st(self, **kv):
        flat = []
        for k, v in kv.items():
            flat += [k, v]
        self.r("HSET", self.k["st"], *flat)

    def join(self, visitor=None, score=None):
        visitor = visitor or uuid.uuid4().hex
        out = self.run("join", visitor, score if score is not None else
                       int.from_bytes(os.urandom(7), "big") >> 3)
        return visitor, [s(x) if isinstance(x, bytes) else x for x in out]

    def admit(self, number, visitor="v", gen="12345"):
        out = self.run("admit", gen, number, visitor, uuid.uuid4().hex)
        return [s(x) for x in out]

    def redis_now_ms(self):
        sec, usec = self.r("TIME")
        return int(sec) * 1000 + int(usec) // 1000


def past(ms_ago):
    return str(int(time.time() * 1000) - ms_ago)


class LuaTestCase(unittest.TestCase):
    def setUp(self):
        self.r = _REDIS["r"]

    def room(self, **settings):
        room = Room(self.r)
        settings.setdefault("rate_per_minute", "600")
        self.assertEqual(s(room.put(**settings)[0]), "created")
        return room

    def assertOnlyDeclaredKeys(self, room):
        present = {s(k) for k in self.r.scan_keys(f"*{room.event}*")}
        self.assertTrue(present, "the scripts wrote nothing at all")
        self.assertLessEqual(present, set(room.keys), "a script touched a key outside KEYS")


class Join(LuaTestCase):
    def test_numbers_after_opening_are_consecutive(self):
        room = self.room()
        nums = [room.join()[1] for _ in range(5)]
        self.assertEqual([x[0] for x in nums], ["queued"] * 5)
        self.assertEqual([x[2] for x in nums], [1, 2, 3, 4, 5])
        self.assertEqual(nums[0][1], "12345")
        self.assertOnlyDeclaredKeys(room)

    def test_unknown_sold_out_closed_not_open(self):
        self.assertEqual(Room(self.r).join()[1], ["unknown"])
        self.assertEqual(self.room(sold_out="1").join()[1], ["sold_out"])
        self.assertEqual(self.room(opens_at=past(60000), closes_at=past(1000)).join()[1],
                         ["closed"])
        future = str(int(time.time() * 1000) + 3600_000)
        out = self.room(prequeue_at=future, opens_at=future).join()[1]
        self.assertEqual(out, ["not_open", future])

    def test_prequeue_is_bounded_by_max_prequeue(self):
        future = str(int(time.time() * 1000) + 3600_000)
        room = self.room(opens_at=future, max_prequeue="3")
        for _ in range(3):
            self.assertEqual(room.join()[1][0], "prequeue")
        self.assertEqual(room.join()[1], ["prequeue_full", future])
        self.assertEqual(self.r("ZCARD", room.k["pre"]), 3)


class Opening(LuaTestCase):
    def prequeued(self, n, mode="random_at_open"):
        future = str(int(time.time() * 1000) + 3600_000)
        room = self.room(opens_at=future, mode=mode)
        visitors = [room.join(score=1000 - i if mode != "fifo" else None)[0] for i in range(n)]
        return room, visitors

    def open_now(self, room):
        room.r("HSET", room.k["cfg"], "opens_at", past(1))

    def test_random_order_is_the_score_order_and_later_joins_follow(self):
        room, visitors = self.prequeued(5)  # scores 1000, 999, …: the last joiner is first
        self.open_now(room)
        late = room.join()[1]
        self.assertEqual(late[:1] + late[2:3], ["queued", 6])
        got = [room.run("lookup", v, "1") for v in visitors]
        self.assertEqual([[s(g[0]), g[1]] for g in got],
                         [["number", 5], ["number", 4], ["number", 3], ["number", 2],
                          ["number", 1]])
        self.assertEqual(room.st()["pk"], 5)
        self.assertOnlyDeclaredKeys(room)

    def test_fifo_keeps_arrival_order(self):
        room, visitors = self.prequeued(4, mode="fifo")
        self.open_now(room)
        self.assertEqual([room.run("lookup", v, "1")[1] for v in visitors], [1, 2, 3, 4])

    def test_opening_touches_no_member_whatever_the_size(self):
        future = str(int(time.time() * 1000) + 3600_000)
        room = self.room(opens_at=future)
        # 50,000 members written directly (join.lua's effect), then one advance opens
        for base in range(0, 50000, 5000):
            flat = []
            for i in range(base, base + 5000):
                flat += [i, f"v{i:06d}"]
            self.r("ZADD", room.k["pre"], *flat)
        self.open_now(room)
        self.r("CONFIG", "SET", "slowlog-log-slower-than", "5000")  # 5 ms
        self.r("SLOWLOG", "RESET")
        head, _ = room.advance()
        self.assertEqual((head["opened"], head["n"], head["prequeue"]), (1, 50000, 0))
        self.assertEqual(self.r("SLOWLOG", "GET", 10), [], "opening took over 5 ms")
        self.assertEqual(room.run("lookup", "v012345", "1"), [b"number", 12346])

    def test_prequeue_ticket_lost_by_redis_gets_the_next_number_once(self):
        room, visitors = self.prequeued(3)
        self.open_now(room)
        room.advance()
        self.r("ZREM", room.k["pre"], visitors[0])  # lost (e.g. a failover)
        first = room.run("lookup", visitors[0], "1")
        self.assertEqual(first, [b"number", 4])
        self.assertEqual(room.run("lookup", visitors[0], "1"), first)
        self.assertEqual(room.join()[1][2], 5)


class Advance(LuaTestCase):
    def test_passes_accrue_at_the_rate_capped_at_one_second(self):
        room = self.room(rate_per_minute="600")
        for _ in range(100):
            room.join()
        room.advance()
        set_at = time.monotonic()
        room.hset_st(last=past(500), credit=0)
        head, cfg = room.advance()
        # 10/s for 0.5 s, plus whatever a loaded machine let pass between the two calls
        late = time.monotonic() - set_at
        self.assertIn(head["wm"], range(5, 7 + int(late * 10)), f"{late:.3f} s between calls")
        self.assertEqual(cfg["rate_per_minute"], "600")
        room.hset_st(last=past(60000))
        wm = head["wm"]
        head, _ = room.advance()
        self.assertLessEqual(head["wm"] - wm, 11, "an idle minute banked a burst")

    def test_paused_passes_nothing(self):
        room = self.room(rate_per_minute="600", paused="1")
        for _ in range(20):
            room.join()
        room.advance()
        room.hset_st(last=past(5000))
        self.assertEqual(room.advance()[0]["wm"], 0)

    def test_noshows_are_passed_again_but_fans_who_came_are_not(self):
        room = self.room(rate_per_minute="60", noshow_grace_seconds="2")
        for _ in range(30):
            room.join()
        room.advance()
        # numbers 1..10 passed 3 s ago: 1..3 claimed, 4..5 came but had to wait
        room.hset_st(wm=10, inb=10, inc=3, credit=0, last=past(1))
        room.r("RPUSH", room.k["wb"], f"{past(3000)}:1:10")
        for n in (1, 2, 3):
            room.r("SETBIT", room.k["cb"], n, 1)
        for n in (1, 2, 3, 4, 5):
            room.r("SETBIT", room.k["sb"], n, 1)
        head, _ = room.advance()
        self.assertEqual(head["noshows"], 5)
        self.assertEqual(head["wm"], 15, "the 5 no-shows' slots are passed again")
        self.assertEqual(room.st()["rhi"], 10)

    def test_unknown_room(self):
        self.assertIsNone(Room(self.r).advance())


class Admit(LuaTestCase):
    def passed(self, n, rate="600", **settings):
        room = self.room(rate_per_minute=rate, **settings)
        for _ in range(n):
            room.join()
        room.advance()
        room.hset_st(wm=n)
        return room

    def test_claims_once_and_repeats_the_same_record(self):
        room = self.passed(3)
        self.assertEqual(room.admit(4), ["not_yet"])
        first = room.admit(2, visitor="a")
        self.assertEqual(first[0], "new")
        iat, exp, jti, who = first[1].split(":")
        self.assertEqual(int(exp) - int(iat), 600)
        self.assertEqual(who, "a")
        self.assertEqual(room.admit(2, visitor="a"), ["existing", first[1]])
        self.assertEqual(room.admit(2, gen="999"), ["unknown"])
        self.assertEqual(self.r("ZSCORE", room.k["active"], "a"), str(int(exp) * 1000).encode())
        self.assertEqual(room.st()["claimed"], 1)
        self.assertOnlyDeclaredKeys(room)

    def test_claim_bucket_meters_claims_at_the_rate(self):
        # 60/min: the bucket holds one claim; passed numbers beyond it wait
        room = self.passed(10, rate="60")
        got = [room.admit(n)[0] for n in range(1, 6)]
        self.assertEqual(got, ["new", "wait", "wait", "wait", "wait"])
        self.assertEqual(room.st()["claimed"], 1)
        for n in range(2, 6):  # the ones told to wait came: they are not no-shows
            self.assertEqual(self.r("GETBIT", room.k["sb"], n), 1)
        room.hset_st(clast=past(1000))  # one second later: one more token
        self.assertEqual([room.admit(n)[0] for n in (2, 3)], ["new", "wait"])

    def test_bucket_does_not_fill_while_paused(self):
        room = self.passed(5, rate="60")
        self.assertEqual(room.admit(1)[0], "new")
        room.r("HSET", room.k["cfg"], "paused", "1")
        room.hset_st(clast=past(10000))
        self.assertEqual(room.admit(2)[0], "wait")

    def test_numbers_let_in_before_a_redis_loss_are_not_metered(self):
        room = self.passed(10, rate="60")
        room.hset_st(rwm=5)
        self.assertEqual([room.admit(n)[0] for n in range(1, 6)], ["new"] * 5)
        self.assertEqual([room.admit(n)[0] for n in (6, 7)], ["new", "wait"])

    def test_late_claimer_waits_for_max_active(self):
        room = self.passed(5, rate="6000", max_active="1")
        self.assertEqual(room.admit(1, visitor="a")[0], "new")
        room.hset_st(rhi=5, inb=0, inc=0)  # 1..5 retired; 2..5 no-shows: late claimers
        self.assertEqual(room.admit(2, visitor="b"), ["wait"])
        room.r("ZREM", room.k["active"], "a")
        self.assertEqual(room.admit(2, visitor="b")[0], "new")

    def test_a_number_held_by_two_visitors_gives_each_its_own_admission(self):
        # regression: admit.lua answered 'existing' with the first visitor's record to
        # whoever presented the number (two tickets share one after a Redis loss)
        room = self.passed(3, rate="6000")
        a, b = room.admit(2, visitor="a"), room.admit(2, visitor="b")
        self.assertEqual((a[0], b[0]), ("new", "new"))
        self.assertEqual((a[1].split(":")[3], b[1].split(":")[3]), ("a", "b"))
        self.assertNotEqual(a[1].split(":")[2], b[1].split(":")[2], "one jti for two fans")
        self.assertEqual(room.admit(2, visitor="a"), ["existing", a[1]])
        self.assertEqual(room.admit(2, visitor="b"), ["existing", b[1]])
        self.assertIsNotNone(self.r("ZSCORE", room.k["active"], "b"))
        st = room.st()
        self.assertEqual((st["claimed"], st["inc"]), (2, 1), "inc counts numbers, not claims")
        self.assertOnlyDeclaredKeys(room)

    def test_a_second_visitor_of_a_number_is_metered_even_below_rwm(self):
        room = self.passed(3, rate="60")  # the bucket holds one claim
        room.hset_st(rwm=3, ctok=0, clast=room.redis_now_ms())  # and it is empty
        self.assertEqual(room.admit(2, visitor="a")[0], "new")  # let in before the loss
        self.assertEqual(room.admit(2, visitor="b"), ["wait"])
        room.hset_st(clast=past(1000))
        self.assertEqual(room.admit(2, visitor="b")[0], "new")

    def test_a_legacy_record_naming_no_visitor_is_answered_as_before(self):
        room = self.passed(3)
        self.r("HSET", room.k["adm"], 2, "1700000000:1700000600:abc")
        self.assertEqual(room.admit(2, visitor="x"), ["existing", "1700000000:1700000600:abc"])

    def test_sold_out_and_closed(self):
        room = self.passed(2, sold_out="1")
        self.assertEqual(room.admit(1), ["sold_out"])
        room = self.passed(2)
        room.r("HSET", room.k["cfg"], "closes_at", past(1))
        self.assertEqual(room.admit(1), ["closed"])


class SettingsAndDelete(LuaTestCase):
    def test_put_patch_and_checks_across_fields(self):
        room = Room(self.r)
        self.assertEqual(s(room.put(rate_per_minute="60")[0]), "created")
        self.assertEqual(s(room.put(how="patch", gen="777", paused="1")[0]), "patched")
        _, cfg = room.advance()
        self.assertEqual((cfg["gen"], cfg["paused"], cfg["rate_per_minute"]), ("12345", "1", "60"))
        out = room.put(how="patch", opens_at="2000", closes_at="1000")
        self.assertEqual([s(x) for x in out], ["invalid", "closes_at must be after opens_at"])
        self.assertEqual(s(Room(self.r).put(how="patch", paused="0")[0]), "unknown")

    def test_delete_leaves_a_tombstone_and_recreation_clears_it(self):
        room = self.room()
        room.join()
        self.assertEqual(room.run("delete"), 1)
        self.assertEqual(room.run("delete"), 0)
        self.assertEqual(self.r("GET", room.k["gone"]), b"12345")
        self.assertIsNone(room.advance("12345", "5", "5", "0", "1", "0", "gen", "12345",
                                       "rate_per_minute", "60"),
                          "a deleted room was written back")
        self.assertEqual(s(room.put(gen="55")[0]), "created")
        self.assertEqual(self.r("EXISTS", room.k["gone"]), 0)
        self.assertOnlyDeclaredKeys(room)


class Stock(LuaTestCase):
    """The scripts' reading of the reserve's stock hash (prelude.lua stock_at): written here
    as the reserve's stock.lua writes it (tests/integration/test_gateway_stock.py has the
    real feed); what is judged is the gateway's rule: fresh and empty stops everything,
    stale or switched off is ignored, a known stock caps the passes."""

    def stock(self, room, left, held, age_ms=0):
        key = room.keys[0][:-len("q:cfg")] + "stock"
        self.r("HSET", key, "left", left, "held", held, "total", left + held, "version", 1,
               "at", room.redis_now_ms() - age_ms)

    def crowd(self, room, n):
        for _ in range(n):
            room.join()
        room.advance()
        room.hset_st(last=past(5000), credit=0)

    def test_nothing_left_stops_passes_joins_and_claims(self):
        room = self.room(rate_per_minute="6000")
        self.crowd(room, 10)
        room.hset_st(wm=2, last=past(5000))  # passed earlier, out of their grace
        self.stock(room, 0, 3)
        head, _ = room.advance()
        self.assertEqual((head["wm"], head["left"], head["held"]), (2, 0, 3))
        self.assertEqual(room.join()[1], ["sold_out"])
        self.assertEqual(room.admit(1), ["stock_out", 3])
        self.assertEqual(self.r("GETBIT", room.k["sb"], 1), 1, "it came: no no-show")
        self.stock(room, 1, 2)  # a unit back: the next number passes
        room.hset_st(last=past(5000))
        self.assertEqual(room.advance()[0]["wm"], 3)

    def test_everything_booked_sells_the_room_out_once(self):
        room = self.room(rate_per_minute="6000")
        self.crowd(room, 5)
        self.stock(room, 0, 2)  # held units may come back: not for good
        self.assertEqual(room.advance()[1].get("sold_out", "0"), "0")
        self.stock(room, 0, 0)  # every unit booked
        head, cfg = room.advance()
        self.assertEqual(cfg["sold_out"], "1")
        self.assertEqual(s(self.r("HGET", room.k["cfg"], "sold_out")), "1")
        self.assertEqual(room.join()[1], ["sold_out"])
        # the operator reopens it (a refund came back): the stock does not close it again
        self.assertEqual(s(room.put("patch", sold_out="0")[0]), "patched")
        self.assertEqual(room.advance()[1].get("sold_out", "0"), "0")

    def test_a_known_stock_caps_the_passes(self):
        room = self.room(rate_per_minute="6000")
        self.crowd(room, 20)
        self.stock(room, 4, 0)
        self.assertEqual(room.advance()[0]["wm"], 4, "at most the units left")
        room.hset_st(last=past(5000))
        self.assertEqual(room.advance()[0]["wm"], 4, "the passed and unclaimed count")

    def test_stale_or_ignored_stock_changes_nothing(self):
        room = self.room(rate_per_minute="6000")
        self.crowd(room, 20)
        self.stock(room, 0, 5, age_ms=6000)
        head, _ = room.advance()
        self.assertEqual((head["left"], head["held"]), (-1, -1), "older than 5 s: unknown")
        self.assertGreater(head["wm"], 0)
        off = self.room(rate_per_minute="6000", stock_aware="0")
        self.crowd(off, 20)
        self.stock(off, 0, 5)
        head, _ = off.advance()
        self.assertEqual(head["left"], -1)
        self.assertGreater(head["wm"], 0, "a room not stock_aware runs on its rate")
        self.assertEqual(off.join()[1][0], "queued")


class Restore(LuaTestCase):
    def test_a_lost_room_is_written_back_from_a_gateways_memory(self):
        room = self.room(rate_per_minute="600", max_active="7")
        for _ in range(20):
            room.join()
        room.hset_st(wm=8)
        head, cfg = room.advance()
        flat = []
        for k, v in cfg.items():
            flat += [k, v]
        self.r("UNLINK", *room.keys)  # Redis lost everything
        head2, cfg2 = room.advance(cfg["gen"], str(head["wm"]), "23", str(head["claimed"]), "1",
                                   "64", *flat)
        self.assertEqual(head2["restored"], 1)
        self.assertEqual(cfg2, cfg)
        self.assertGreaterEqual(head2["wm"], head["wm"])
        self.assertEqual(head2["n"], 23 + 64, "numbers seen in tickets are never handed out "
                         "again, nor those others may have handed out since")
        self.assertEqual(room.st()["rwm"], head["wm"])
        self.assertEqual(room.join()[1][2], 88)
        # a second gateway with an older view changes nothing
        head3, _ = room.advance(cfg["gen"], "3", "10", "0", "1", "64", *flat)
        self.assertEqual(head3["restored"], 0)
        self.assertGreaterEqual(head3["wm"], head2["wm"])
        self.assertEqual(head3["n"], 88)

    def test_floors_of_another_generation_are_ignored(self):
        room = self.room()
        room.join()
        head, _ = room.advance("999", "50", "50", "0", "1", "64", "gen", "999")
        self.assertEqual((head["n"], head["restored"]), (1, 0))
        self.assertLess(head["wm"], 50)

    def test_a_lost_count_resumes_past_what_a_gateway_saw_plus_the_jump(self):
        # regression: the restore set q:n to the highest number the restoring gateway saw,
        # so numbers other gateways had handed out since were handed out again
        room = self.room(rate_per_minute="600", paused="1")
        for _ in range(10):
            room.join()
        _, cfg = room.advance()
        flat = [x for kv in cfg.items() for x in kv]
        for k in room.keys:  # Redis lost everything of the room
            self.r("DEL", k)
        head, _ = room.advance(cfg["gen"], "0", "12", "0", "1", "100", *flat)
        self.assertEqual((head["restored"], head["n"]), (1, 112))
        # a gateway that saw less than the jump covers leaves the count alone
        head, _ = room.advance(cfg["gen"], "0", "60", "0", "1", "100", *flat)
        self.assertEqual(head["n"], 112)
        self.assertEqual(room.join()[1][2], 113)
        # a count lost alone (a lagging replica) jumps too; one intact is left as it is
        self.r("SET", room.k["n"], 5)
        self.assertEqual(room.advance(cfg["gen"], "0", "113", "0", "1", "7", *flat)[0]["n"],
                         120)
        self.assertEqual(room.advance(cfg["gen"], "0", "120", "0", "1", "7", *flat)[0]["n"],
                         120)


    def test_the_hole_a_jump_left_is_skipped_but_numbers_seen_in_it_are_passed(self):
        room = self.room(rate_per_minute="6000", noshow_grace_seconds="3600")
        for _ in range(10):
            room.join()
        _, cfg = room.advance()
        flat = [x for kv in cfg.items() for x in kv]
        for k in room.keys:
            self.r("DEL", k)
        head, _ = room.advance(cfg["gen"], "0", "10", "0", "1", "100", *flat)
        self.assertEqual(head["n"], 110)
        # another gateway had handed out up to 14 before the loss: those are held
        room.advance(cfg["gen"], "0", "14", "0", "1", "100", *flat)
        # its next advance knows q:n: the hole's top says nothing about who holds what
        room.advance(cfg["gen"], "0", "110", "0", "1", "100", *flat)
        st = room.st()
        self.assertEqual((st["hlo"], st["hhi"]), (14, 110))
        self.assertEqual(room.join()[1][2], 111)
        room.hset_st(last=past(1000), credit=0)  # a second of credit: up to 100 passes
        head, _ = room.advance()
        self.assertEqual(head["wm"], 110, "passed up to 14, then the hole skipped")
        self.assertEqual([s(b).split(":")[1:] for b in self.r("LRANGE", room.k["wb"], 0, -1)],
                         [["1", "14"]], "the hole is in no batch (it cannot be no-shows)")
        st = room.st()
        self.assertEqual((st["slo"], st["shi"]), (14, 110))
        self.assertNotIn("hlo", st)
        # a fan of the hole (of a gateway that never told) claims late: metered, not in inc
        self.assertEqual(room.admit(50, visitor="late")[0], "new")
        self.assertEqual(room.st()["inc"], 0)
        self.assertEqual(room.admit(3, visitor="early")[0], "new")
        self.assertEqual(room.st()["inc"], 1)
        self.assertOnlyDeclaredKeys(room)


if __name__ == "__main__":
    unittest.main()
