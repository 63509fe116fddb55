"""A buyer's first hold proven by the gateway's record of their token instead of an ES256
verification (docs/tokens.md): the gateway stores SHA-256 of every admission
token it hands out under os:{<event>}:tk:<hash>, expiring with the token; the reserve
judges an uncached token's claims without its signature and the hold script holds only
if that record exists, else the reserve verifies the signature as before.

Each test tries to get a hold out of a token the gateway never signed (or no longer
vouches for) while records exist, and checks which path decided
(onsale_reserve_token_records_total{result="matched"|"missing"})."""

import hashlib
import http.client
import time
import uuid

import stack
from stack import metric_sum

SEATS = [{"id": f"A-{i}", "section": "A", "price": 12000} for i in range(1, 7)]
GA = [{"id": "ga", "capacity": 10, "price": 3000}]
RECORDS = "onsale_reserve_token_records_total"


def setUpModule():
    stack.module_stack("records")


def record(S, event, token, exp_ms=None):
    """What the gateway does when it hands token out (gateway/gw_admit.c record_token)."""
    key = f"os:{{{event}}}:tk:{hashlib.sha256(token.encode()).hexdigest()}"
    if exp_ms is None:
        exp_ms = stack.jwt_parts(token)[1]["exp"] * 1000
    S.redis("SET", key, "1", "PXAT", str(exp_ms))
    return key


def forged_signature(token):
    """The same header and claims with a signature of the right shape that verifies for
    nobody."""
    h, p, _ = token.split(".")
    return ".".join([h, p, stack.b64url(b"\x01" * 64)])


class TokenRecords(stack.ReserveTestCase):
    def counts(self):
        m = self.S.metrics()
        return (metric_sum(m, RECORDS, result="matched"),
                metric_sum(m, RECORDS, result="missing"))

    def assertCounts(self, before, matched, missing, msg):
        after = self.counts()
        self.assertEqual((after[0] - before[0], after[1] - before[1]), (matched, missing),
                         f"{msg}: token records matched/missing went {before} → {after}")

    def test_recorded_token_holds_without_a_signature_check(self):
        ev = self.new_event(seats=SEATS, pools=GA, max_per_buyer=6)
        tok = self.S.token(ev, "recorded")
        record(self.S, ev, tok)
        before = self.counts()
        h = self.hold(ev, tok, seats=["A-1", "A-2"])
        self.assertCounts(before, 1, 0, "first hold with a recorded token")
        # then remembered for holds; the other routes verify its signature once
        self.hold(ev, tok, pool="ga", quantity=2)
        r = self.c.get(f"/v1/holds/{h.json['hold_id']}", token=tok)
        self.assertStatus(r, 200)
        self.assertEqual(r.json["seats"], ["A-1", "A-2"])
        self.assertCounts(before, 1, 0, "later requests of the same buyer")
        # a GA hold as a first hold takes the same path
        tok2 = self.S.token(ev, "recorded-ga")
        record(self.S, ev, tok2)
        self.hold(ev, tok2, pool="ga", quantity=1)
        self.assertCounts(before, 2, 0, "a first hold on a pool")

    def test_unrecorded_token_is_verified_and_holds(self):
        ev = self.new_event(seats=SEATS, pools=GA)
        before = self.counts()
        tok = self.S.token(ev, "not-recorded")  # minted here, not by a gateway
        self.hold(ev, tok, seats=["A-1"])
        self.assertCounts(before, 0, 1, "a token without a record")
        self.hold(ev, self.S.token(ev, "not-recorded-ga"), pool="ga", quantity=1)
        self.assertCounts(before, 0, 2, "a pool hold with a token without a record")

    def test_forged_signature_never_holds_with_or_without_records(self):
        ev = self.new_event(seats=SEATS, pools=GA)
        real = self.S.token(ev, "victim")
        forged = forged_signature(real)
        path = f"/v1/events/{ev}/holds"
        before = self.counts()
        # no record at all: the fallback verification refuses it
        r = self.c.post(path, {"seats": ["A-1"]}, token=forged)
        self.assertStatus(r, 401, "invalid_token", msg="forged signature, no record:")
        # the real token recorded: its record is not the forged token's
        record(self.S, ev, real)
        r = self.c.post(path, {"seats": ["A-1"]}, token=forged)
        self.assertStatus(r, 401, "invalid_token", msg="forged signature, real token recorded:")
        r = self.c.post(path, {"pool": "ga", "quantity": 1}, token=forged)
        self.assertStatus(r, 401, "invalid_token", msg="forged signature on a pool:")
        # claims copied from the real token under another sub, signed by another key
        from cryptography.hazmat.primitives.asymmetric import ec
        claims = stack.jwt_parts(real)[1]
        other = self.S.sign(dict(claims, sub="mallory"), key=ec.generate_private_key(ec.SECP256R1()))
        r = self.c.post(path, {"seats": ["A-1"]}, token=other)
        self.assertStatus(r, 401, "invalid_token", msg="claims copied, another key:")
        self.assertCounts(before, 0, 4, "forged tokens")
        # nothing was held: the real buyer takes A-1
        self.hold(ev, real, seats=["A-1"])
        self.assertCounts(before, 1, 4, "the real token")

    def test_record_of_an_untrusted_kid_does_not_admit(self):
        # Signed by a key the reserve does not hold (a gateway key since removed from
        # admission_keys): its record exists, the kid check refuses it first.
        from cryptography.hazmat.primitives.asymmetric import ec
        ev = self.new_event(seats=SEATS)
        tok = self.S.sign(self.S.claims(ev, "old-key"), key=ec.generate_private_key(ec.SECP256R1()),
                          headers={"kid": "removed-key"})
        record(self.S, ev, tok)
        before = self.counts()
        r = self.c.post(f"/v1/events/{ev}/holds", {"seats": ["A-1"]}, token=tok)
        self.assertStatus(r, 401, "invalid_token", msg="recorded token of an unknown kid:")
        self.assertCounts(before, 0, 0, "an unknown kid never reaches Redis")

    def test_expired_token_with_a_live_record_does_not_hold(self):
        ev = self.new_event(seats=SEATS)
        now = int(time.time())
        tok = self.S.sign(dict(self.S.claims(ev, "late"), iat=now - 7200, nbf=now - 7200,
                               exp=now - 3600))
        record(self.S, ev, tok, exp_ms=(now + 600) * 1000)  # a record outliving its token
        before = self.counts()
        r = self.c.post(f"/v1/events/{ev}/holds", {"seats": ["A-1"]}, token=tok)
        self.assertStatus(r, 401, "invalid_token", msg="expired token with a record:")
        self.assertCounts(before, 0, 0, "an expired token never reaches Redis")

    def test_token_for_another_event_with_a_record_there_is_403(self):
        e1 = self.new_event(seats=SEATS)
        e2 = self.new_event(seats=SEATS)
        tok = self.S.token(e1, "roamer")
        record(self.S, e1, tok)
        record(self.S, e2, tok)
        r = self.c.post(f"/v1/events/{e2}/holds", {"seats": ["A-1"]}, token=tok)
        self.assertStatus(r, 403, "wrong_event")

    def test_records_lost_with_redis_fall_back_to_verification(self):
        ev = self.new_event(seats=SEATS)
        toks = [self.S.token(ev, f"lost-{i}") for i in range(2)]
        for t in toks:
            record(self.S, ev, t)
        self.hold(ev, toks[0], seats=["A-1"])
        before = self.counts()
        self.assertEqual(self.S.redis("FLUSHALL"), "OK")  # Redis lost everything
        h = self.hold(ev, toks[1], seats=["A-2"])
        self.assertCounts(before, 0, 1, "a recorded token after Redis lost its records")
        self.assertEqual(h.json["seats"], ["A-2"])
        # the first buyer is remembered as proven by its record: still served
        self.hold(ev, toks[0], seats=["A-3"])

    def test_a_record_proves_a_hold_and_nothing_else(self):
        """Regression: a token proven by a record was cached as
        verified for every route, so whoever could write os:{event}:tk:* could act as any
        sub. Here the record of a forged token is written with the stack's admin user (the
        reserve's own Redis user cannot write one: RedisUsers below): the forged token
        takes a hold — what a record may prove — and is refused on every other route."""
        import os
        ev = self.new_event(seats=SEATS, pools=GA, max_per_buyer=6)
        real = self.S.token(ev, "acl-victim")
        h = self.hold(ev, real, pool="ga", quantity=1)
        cf = self.c.post(f"/v1/holds/{h.json['hold_id']}/confirm",
                         {"payment": {"amount": h.json["amount"], "currency": "EUR",
                                      "source": "tok_visa"}},
                         token=real, headers={"Idempotency-Key": os.urandom(8).hex()})
        self.assertStatus(cf, 201, msg="the victim's confirm:")
        victim_hold = self.hold(ev, real, seats=["A-6"]).json["hold_id"]
        forged = forged_signature(real)  # the victim's claims, a signature of nobody's
        record(self.S, ev, forged)
        mine = self.hold(ev, forged, pool="ga", quantity=1).json["hold_id"]
        refused = {
            "read the victim's hold": self.c.get(f"/v1/holds/{victim_hold}", token=forged),
            "read the victim's checkout": self.c.get(f"/v1/checkouts/{cf.json['checkout_id']}",
                                                     token=forged),
            "extend": self.c.post(f"/v1/holds/{victim_hold}/extend", {}, token=forged),
            "release the victim's hold": self.c.delete(f"/v1/holds/{victim_hold}", token=forged),
            "read its own hold": self.c.get(f"/v1/holds/{mine}", token=forged),
            "confirm its own hold": self.c.post(
                f"/v1/holds/{mine}/confirm",
                {"payment": {"amount": 3000, "currency": "EUR", "source": "tok_visa"}},
                token=forged, headers={"Idempotency-Key": os.urandom(8).hex()}),
            "done": self.c.post(f"/v1/events/{ev}/done", None, token=forged),
        }
        for what, r in refused.items():
            self.assertStatus(r, 401, "invalid_token", msg=f"forged token with a record, {what}:")
        # the victim's hold is untouched
        self.assertStatus(self.c.get(f"/v1/holds/{victim_hold}", token=real), 200)


# The reserve's auth_fail_limit (its default: deploy/reserve.conf.example); this module's
# stack keeps the defaults, token_records on among them.
FAIL_LIMIT = 50


def event_scripts(S, ev, action):
    """Runs action() while every Redis of the stack is MONITORed and returns how many
    EVAL/EVALSHA calls named a key of event ev: Redis' own record of what ran for that
    event. Counting only ev's keys leaves out what else a shared stack runs meanwhile (the
    gateways' ticks of other tests' rooms, on the cluster); each node's stream is read up
    to an ECHO of a fresh mark sent after action() returned, so nothing is missed. An
    EVAL right after an EVALSHA from the same client is the NOSCRIPT retry of that one
    script run, not a second."""
    mons = []
    try:
        for port in S.redis_ports:
            m = stack.Redis(port, auth=S.redis_auth, ssl_ctx=S.redis_ssl)
            mons.append(m)
            m("MONITOR")
        action()
        mark = f"mark-{uuid.uuid4().hex}"
        tag = f"{{{ev}}}"
        count = 0
        last = {}  # client address -> the command it sent last
        for m in mons:
            e = stack.Redis(m.port, auth=S.redis_auth, ssl_ctx=S.redis_ssl)
            try:
                e("ECHO", mark)
            finally:
                e.close()
            while True:
                line = m._reply()
                if mark in line:
                    break
                words = line.split('"')
                client = line.split("[", 1)[-1].split("]", 1)[0]  # "<db> <address>"
                cmd = words[1].lower() if len(words) > 1 else ""
                retry = cmd.startswith("eval") and not cmd.startswith("evalsha") and \
                    last.get(client, "").startswith("evalsha")
                last[client] = cmd
                # an EVALSHA answered NOSCRIPT is sent again as EVAL: one script, not two
                if cmd in ("eval", "evalsha", "eval_ro", "evalsha_ro") and tag in line and \
                        not retry:
                    count += 1
        return count
    finally:
        for m in mons:
            m.close()


class FailedTokenLimitBeforeAnyWork(stack.ReserveTestCase):
    """Regression: a forged token shaped for a record went to
    inspection and the hold script before the failed-token limit was asked, so every
    forged token cost a body parse and a hold EVAL on the event's slot, also from an
    address already limited."""

    def test_forged_tokens_past_the_limit_cost_no_hold_script(self):
        ev = self.new_event(seats=SEATS, pools=GA)
        real = self.S.token(ev, "limit-victim")
        h, p, _ = real.split(".")
        src = "127.0.0.11"  # an address of its own: other tests' failures do not count
        conn = http.client.HTTPSConnection(stack.HOST, self.S.reserve_port, context=self.S.ctx,
                                           timeout=stack.HTTP_TIMEOUT, source_address=(src, 0))
        self.addCleanup(conn.close)
        statuses = []

        def forge():
            for i in range(200):
                # a real kid, consistent claims, garbage of the right length as the signature
                tok = ".".join([h, p, stack.b64url(i.to_bytes(2, "big") * 32)])
                conn.request("POST", f"/v1/events/{ev}/holds",
                             body=b'{"pool": "ga", "quantity": 1}',
                             headers={"Authorization": f"Bearer {tok}",
                                      "Content-Type": "application/json"})
                resp = conn.getresponse()
                resp.read()
                statuses.append(resp.status)
        spent = event_scripts(self.S, ev, forge)
        self.assertEqual(statuses, [401] * FAIL_LIMIT + [429] * (200 - FAIL_LIMIT))
        self.assertLessEqual(spent, FAIL_LIMIT,
                             f"200 forged tokens ran {spent} scripts (limit {FAIL_LIMIT})")


class RedisUsers(stack.ReserveTestCase):
    """Regression: both services shared one Redis user with
    ~* +@all, so whoever had the reserve's Redis credentials could write token records
    (and mint first holds) and the gateway's could rewrite holds. Each service now has
    a user with only its key patterns and commands (deploy/onsale redis_acl_conf,
    docs/operations.md "Redis users")."""

    def client(self, service):
        r = stack.redis_as(self.S, service)
        self.addCleanup(r.close)
        return r

    def assertNoPerm(self, r, *cmd):
        """Refused by the ACL: NOPERM, or inside a script "The user executing the script
        can't access/run" …"""
        with self.assertRaisesRegex(RuntimeError, "NOPERM|user executing the script can't",
                                    msg=f"{cmd!r} was allowed"):
            r(*cmd)

    def test_the_reserve_user_cannot_write_a_token_record(self):
        ev = self.new_event(seats=SEATS)
        r = self.client("reserve")
        key = f"os:{{{ev}}}:tk:{'ab' * 32}"
        self.assertNoPerm(r, "SET", key, "1")
        self.assertNoPerm(r, "SET", key, "1", "PXAT", str(int(time.time() + 600) * 1000))
        self.assertNoPerm(r, "EVAL", "return redis.call('SET', KEYS[1], '1')", "1", key)
        seed = f"os:{{{ev}}}:seed"
        self.assertNoPerm(r, "EVAL", f"return redis.call('SET', '{key}', '1')", "1", seed)
        self.assertNoPerm(r, "DEL", key)
        # what the hold scripts do: read a record beside the seed key
        self.assertEqual(r("EVAL", f"return redis.call('EXISTS', '{key}')", "1", seed), 0)
        self.assertNoPerm(r, "SET", f"os:{{{ev}}}:q:n", "1")  # nor the waiting room
        self.assertNoPerm(r, "FLUSHALL")
        self.assertNoPerm(r, "CONFIG", "SET", "appendonly", "no")

    def test_the_gateway_user_cannot_touch_holds(self):
        ev = self.new_event(seats=SEATS, pools=GA)
        tok = self.S.token(ev, "gw-acl")
        h = self.hold(ev, tok, seats=["A-1"]).json["hold_id"]
        r = self.client("gateway")
        for kind in (f"h:{h}", "s:A-1", "b:gw-acl", "p:ga", "pu:ga", "seed", f"ik:{'cd' * 32}"):
            key = f"os:{{{ev}}}:{kind}"
            self.assertNoPerm(r, "GET", key)
            self.assertNoPerm(r, "DEL", key)
            self.assertNoPerm(r, "EVAL", "return redis.call('TYPE', KEYS[1])", "1", key)
        # its own: a token record (write-only), the waiting room's keys
        rec = f"os:{{{ev}}}:tk:{'ef' * 32}"
        self.assertEqual(r("SET", rec, "1", "PXAT", str(int(time.time() + 600) * 1000)), "OK")
        self.assertNoPerm(r, "GET", rec)
        self.assertEqual(r("EXISTS", f"os:{{{ev}}}:q:cfg"), 0)
        self.assertNoPerm(r, "FLUSHALL")
        self.assertNoPerm(r, "KEYS", "*")
        # the hold is as the reserve left it
        self.assertStatus(self.c.get(f"/v1/holds/{h}", token=tok), 200)

    def test_a_record_from_the_reserve_user_makes_no_forged_token_hold(self):
        ev = self.new_event(seats=SEATS, pools=GA)
        forged = forged_signature(self.S.token(ev, "acl-forger"))
        key = f"os:{{{ev}}}:tk:{hashlib.sha256(forged.encode()).hexdigest()}"
        r = self.client("reserve")
        with self.assertRaisesRegex(RuntimeError, "NOPERM"):
            r("SET", key, "1", "PXAT", str(int(time.time() + 600) * 1000))
        before = self.counts()
        resp = self.c.post(f"/v1/events/{ev}/holds", {"pool": "ga", "quantity": 1}, token=forged)
        self.assertStatus(resp, 401, "invalid_token", msg="forged token after the write:")
        after = self.counts()
        self.assertEqual((after[0] - before[0], after[1] - before[1]), (0, 1))

    def counts(self):
        return TokenRecords.counts(self)
