"""Numbering in batches (docs/design.md, "Numbering in batches"), with two gateways on one
Redis, each gathering its new joins for WINDOW_US before one join_batch.lua call: joins
made at once through both are numbered once each with nothing lost, in far fewer
scripts than joins; joins that arrive well more than a window after others always get
larger numbers, whichever gateway took them; a proof of work used twice within one batch
refuses only the fan that replayed it; a batch whose script times out answers every fan
of it 503 with Retry-After, and the joins after it are still numbered once each. (The cap that sends a full batch before its
window ends: tests/unit/gateway/test_gw_batch.c.)"""

import asyncio

import gwstack
import stack
from gwstack import ticket_number

WINDOW_US = 200000  # long enough that a burst's joins share batches on a busy machine
POW_BITS = 8


def setUpModule():
    gwstack.module_stack("gw-batch", gateways=2, conf={
        "workers": 1,  # one batcher per gateway: a burst's joins meet in one batch
        "join_batch_us": WINDOW_US,
        "join_batch_max": 256,
        "pow_base_bits": POW_BITS,
        "pow_max_bits": POW_BITS,
        "pow_block_free_per_min": 0,
        "pow_total_free_per_min": 0,
    })


def scripts_run(redis):
    """EVALSHA calls Redis has run so far (INFO commandstats)."""
    info = redis("INFO", "commandstats")
    info = info.decode() if isinstance(info, bytes) else info
    for line in info.splitlines():
        if line.startswith("cmdstat_evalsha:"):
            return int(line.split("calls=", 1)[1].split(",", 1)[0])
    return 0


class Batches(gwstack.GatewayTestCase):

    def fire(self, plan, timeout=60):
        """plan: [(gateway, request, delay_s)]; one connection each, opened first, then
        every request written (each `delay_s` after the first writes); the answers in
        plan order."""
        async def run():
            conns = []
            for g, _, _ in plan:
                conns += await stack._open_conns(g.port, self.GS.S.ctx, 1, 1, timeout)
            try:
                reqs = [stack.delayed(r, d) for _, r, d in plan]
                return await stack._fire(conns, reqs, timeout)
            finally:
                for c in conns:
                    c.close()
        return asyncio.run(run())

    def redis_nodes(self):
        """One client per Redis master: the stack's Redis, or each cluster master."""
        r = self.GS.S.redis
        if isinstance(r, stack.ClusterRedis):
            return [r._conn(p) for p in r.masters()]
        return [r]

    def test_concurrent_joins_through_two_gateways_are_numbered_once(self):
        ev = self.new_room(prefix="bt", rate_per_minute=1, paused=True)
        n = 600
        before = scripts_run(self.GS.redis)
        tickets = self.burst_join(ev, n)
        scripts = scripts_run(self.GS.redis) - before
        nums = sorted(ticket_number(t) for t in tickets)
        self.assertEqual(len(set(nums)), n, "a number was handed out twice")
        self.assertEqual(nums, list(range(1, n + 1)), "numbers lost or skipped")
        self.assertEqual(int(self.GS.redis("GET", f"os:{{{ev}}}:q:n")), n)
        # the joins went in batches: the ticks' own scripts included, far fewer than n
        self.assertLess(scripts, n // 4, f"{scripts} scripts for {n} joins")

    def test_a_join_a_window_later_never_gets_a_smaller_number(self):
        ev = self.new_room(prefix="bt", rate_per_minute=1, paused=True)
        g1, g2 = self.GS.gateways
        join = {g: g.req("POST", f"/q/{ev}/join") for g in (g1, g2)}
        gap = 5 * WINDOW_US / 1e6
        wave = 30
        plan = [(g, join[g], 0.0) for _ in range(wave) for g in (g1, g2)]
        plan += [(g, join[g], gap) for _ in range(wave) for g in (g2, g1)]
        out = self.fire(plan)
        for r in out:
            self.assertEqual(r.status, 201, f"join: {r!r}")
        nums = [ticket_number(r.json["ticket"]) for r in out]
        first, second = nums[:2 * wave], nums[2 * wave:]
        self.assertEqual(sorted(nums), list(range(1, 4 * wave + 1)))
        self.assertLess(max(first), min(second),
                        f"wave 1 {sorted(first)} vs wave 2 {sorted(second)}")

    def test_a_proof_replayed_in_a_batch_refuses_only_that_fan(self):
        ev = self.new_room(prefix="bt", rate_per_minute=60, pow=True)
        g = self.GS.gateways[0]

        def proof():
            ch = self.c.get(f"/q/{ev}/challenge").json
            return f"{ch['challenge']}.{stack.pow_example.solve(ch['challenge'], ch['difficulty'])}"
        p, q = proof(), proof()
        with_p = g.req("POST", f"/q/{ev}/join", headers={"Onsale-Pow": p})
        with_q = g.req("POST", f"/q/{ev}/join", headers={"Onsale-Pow": q})
        out = self.fire([(g, with_p, 0.0), (g, with_p, 0.0), (g, with_q, 0.0)])
        pair = sorted(r.status for r in out[:2])
        self.assertEqual(pair, [201, 409], f"the same proof twice: {out[:2]!r}")
        refused = next(r for r in out[:2] if r.status == 409)
        self.assertStatus(refused, 409, "pow_replayed")
        self.assertIn("challenge", refused.json["pow"])
        self.assertStatus(out[2], 201)
        placed = sorted(ticket_number(r.json["ticket"]) for r in out if r.status == 201)
        self.assertEqual(placed, [1, 2], "the replay took a number")

    def test_a_batch_that_times_out_answers_each_fan_503_and_no_number_twice(self):
        ev = self.new_room(prefix="bt", rate_per_minute=1, paused=True)
        g1, g2 = self.GS.gateways
        join = {g: g.req("POST", f"/q/{ev}/join") for g in (g1, g2)}
        nodes = self.redis_nodes()
        for node in nodes:  # past the 1 s deadline
            node("CLIENT", "PAUSE", "2500", "WRITE")
        try:
            out = self.fire([(g, join[g], 0.0) for _ in range(10) for g in (g1, g2)])
        finally:
            for node in nodes:
                node("CLIENT", "UNPAUSE")
        for r in out:
            self.assertStatus(r, 503, msg="join while Redis is paused:")
            self.assertIsNotNone(r.header("retry-after"), f"no Retry-After: {r!r}")
        after = self.fire([(g, join[g], 0.0) for _ in range(20) for g in (g1, g2)])
        for r in after:
            self.assertEqual(r.status, 201, f"join after the pause: {r!r}")
        nums = [ticket_number(r.json["ticket"]) for r in after]
        self.assertEqual(len(set(nums)), len(nums), "a number was handed out twice")
