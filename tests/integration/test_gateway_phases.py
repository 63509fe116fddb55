"""Phases of an on-sale (docs/api.md "Phases"): a room's schedule, each phase with its own
admission rate and max_active, judged on Redis TIME by every gateway with no leader. Two
gateways pace one room across a transition: no fan is admitted under the rules of the
wrong phase. Claims are counted from Redis' own record of each claim (its iat)."""

import math
import time

import gwstack
from gwstack import rfc3339
from test_gateway_rate import Crowd, claims_by_second, windows


def setUpModule():
    gwstack.module_stack("gw-phases", gateways=2,
                         conf={"poll_min_ms": 500, "poll_max_ms": 3000})


def phase(name, at, rate, **kw):
    return dict(name=name, starts_at=rfc3339(at), rate_per_minute=rate, **kw)


def redis_now(gs):
    t = gs.redis("TIME")
    return int(t[0]) + int(t[1]) / 1e6


class Transition(gwstack.GatewayTestCase):
    def join_all(self, ev, n):
        tickets = self.burst_join(ev, n)
        return [{"ticket": t, "poll_after_ms": 0} for t in tickets]

    def test_the_rate_changes_on_time_on_both_gateways(self):
        slow, fast = 120, 1200  # per minute: 2/s, then 20/s
        switch = math.ceil(redis_now(self.GS)) + 16  # a whole Redis second
        ev = self.new_room(rate_per_minute=6000, noshow_grace_seconds=30, phases=[
            phase("slow", switch - 3600, slow), phase("fast", switch, fast)])
        joined = self.join_all(ev, 500)
        with Crowd(self, ev, joined):
            while redis_now(self.GS) < switch + 14:
                time.sleep(0.5)
        by_s = claims_by_second(self.GS, ev)
        first = min(by_s)
        detail = " ".join(f"{s - switch}:{by_s[s]}" for s in sorted(by_s))
        # invariant 11's bound within each phase: rate * T / 60 + one second's worth (the
        # claim bucket's cap), for 5 s windows, plus 2 for the window edges
        def bound(rate):
            return rate * 5 / 60 + rate / 60 + 2
        before = windows(by_s, first, switch, width=5)
        limit_slow = bound(slow)
        self.assertTrue(before, detail)
        self.assertLessEqual(max(before.values()), limit_slow,
                             f"the slow phase ran faster than its rate: {detail}")
        # what was claimed before the switch was the slow phase's share of that time
        pre = sum(v for s, v in by_s.items() if s < switch)
        self.assertLessEqual(pre, slow / 60 * (switch - first) + 3, detail)
        after = windows(by_s, switch + 2, switch + 14, width=5)
        self.assertTrue(after, detail)
        self.assertLessEqual(max(after.values()), bound(fast), detail)
        self.assertGreaterEqual(min(after.values()), 0.7 * fast / 12,
                                f"the fast phase did not take over on time: {detail}")

    def test_max_active_is_the_phase_in_force(self):
        switch = math.ceil(redis_now(self.GS)) + 8
        ev = self.new_room(rate_per_minute=6000, phases=[
            phase("few", switch - 60, 3000, max_active=4), phase("many", switch, 3000)])
        joined = self.join_all(ev, 40)
        with Crowd(self, ev, joined) as crowd:
            while redis_now(self.GS) < switch + 6:
                time.sleep(0.5)
        by_s = claims_by_second(self.GS, ev)
        pre = sum(v for s, v in by_s.items() if s < switch)
        self.assertEqual(pre, 4, f"claims before the switch: {by_s}")
        self.assertGreater(sum(by_s.values()), 20, f"max_active of 'many' not applied: {by_s}")
        self.assertEqual(crowd.errors, [])


class Schedule(gwstack.GatewayTestCase):
    def test_the_schedule_is_shown_and_edited_while_the_sale_runs(self):
        t = time.time()
        ev = self.new_room(rate_per_minute=60, phases=[
            phase("presale", t - 10, 30, max_active=5, text_during="Code holders <first>"),
            phase("general", t + 3600, 600, text_before="General sale at noon")])
        for gw in self.GS.gateways:  # both gateways show what the other saved
            r = self.GS.admin("GET", f"/admin/events/{ev}", gw=gw)
            self.assertStatus(r, 200)
            got = r.json["phases"]
            self.assertEqual([p["name"] for p in got], ["presale", "general"])
            self.assertEqual(got[0]["text_during"], "Code holders <first>")
            self.assertEqual(got[1]["text_after"], None)
            self.assertEqual(r.json["phase"]["current"], "presale")
            self.assertEqual(r.json["phase"]["next_at"], got[1]["starts_at"])
        out = self.patch(ev, gw=self.GS.gateways[1],
                         phases=[phase("general", t - 5, 900)])
        got = out["phases"]
        self.assertEqual([(p["name"], p["rate_per_minute"]) for p in got], [("general", 900)])
        # a PATCH of other fields keeps the schedule
        out = self.patch(ev, paused=True)
        got = out["phases"]
        self.assertEqual(len(got), 1)
        # null removes it: the room is one phase of its own fields again
        out = self.patch(ev, phases=None)
        got = out["phases"]
        self.assertEqual(got, [])

    def test_bad_schedules_are_400_and_change_nothing(self):
        t = time.time()
        ev = self.new_room(rate_per_minute=60, closes_at=rfc3339(t + 600))
        bad = [
            "not a list",
            [phase("A", t, 60)],
            [phase("a", t, 0)],
            [phase("a", t, 60), phase("b", t - 1, 60)],
            [phase("a", t, 60), phase("a", t + 1, 60)],
            [phase("a", t, 60, text_during="line\nbreak")],
            [phase("a", t, 60, requires_code="yes")],
            [phase("a", t + 700, 60)],  # after closes_at
        ]
        for body in bad:
            r = self.GS.admin("PATCH", f"/admin/events/{ev}", {"phases": body})
            self.assertStatus(r, 400, "invalid_request", msg=repr(body))
        r = self.GS.admin("GET", f"/admin/events/{ev}")
        got = r.json["phases"]
        self.assertEqual(got, [])


class Page(gwstack.GatewayTestCase):
    def test_the_queue_page_shows_the_phase_and_asks_for_the_code(self):
        t = time.time()
        ev = self.new_room(rate_per_minute=600, phases=[
            phase("presale", t - 10, 600, requires_code=True,
                  text_during="Code holders <first>"),
            phase("general", t + 3600, 600, text_before="Everyone from noon")])
        r = self.c.get(f"/q/{ev}")
        self.assertStatus(r, 200)
        html = r.body.decode()
        self.assertIn('<strong id="phase-name">presale</strong>', html)
        self.assertIn("Code holders &lt;first&gt;", html)
        self.assertIn("Everyone from noon", html)
        self.assertIn(f'<form id="code-form" method="post" action="/q/{ev}/join" >', html)
        self.assertIn('data-needs-code="1"', html)
        self.assertNotIn("unsafe-inline", r.headers["content-security-policy"])
        # the form without JavaScript: a code is a place (303 to the page), a typo is a page
        # that says what is wrong and takes nothing
        b = self.GS.admin("POST", f"/admin/events/{ev}/codes",
                          {"phase": "presale", "count": 2})
        self.assertStatus(b, 201)
        codes = self.GS.admin("GET", f"/admin/events/{ev}/codes/1.csv").body.decode()
        code = codes.split("\r\n")[1].split(",")[0]
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        bad = self.c.post(f"/q/{ev}/join", raw=b"code=AAAA-AAAA", headers=form)
        self.assertEqual(bad.status, 400, repr(bad))
        self.assertIn("text/html", bad.headers["content-type"])
        self.assertIn("That is not a presale code", bad.body.decode())  # the page's words
        self.assertIn(f'<form id="code-form" method="post" action="/q/{ev}/join" >',
                      bad.body.decode())
        ok = self.c.post(f"/q/{ev}/join", raw=f"code={code}".encode(), headers=form)
        self.assertEqual(ok.status, 303, repr(ok))
        self.assertIn("set-cookie", ok.headers)
        # without a schedule the page has no phase and no code field
        plain = self.new_room(rate_per_minute=600)
        html = self.c.get(f"/q/{plain}").body.decode()
        self.assertIn('<div class="phase" id="phase" hidden>', html)
        self.assertIn('data-needs-code="0"', html)
