"""Hold lifecycle: expiry decided at read time (invariant 4), ownership of release and
extend (invariant 5), the extension cap and the per-buyer limit."""

import datetime
import time
import uuid

import stack
from stack import seat_state


def setUpModule():
    stack.module_stack("holds")


def parse_ts(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


SEATS = [{"id": f"A-{i}", "section": "A", "price": 12000} for i in range(1, 7)]


class Expiry(stack.ReserveTestCase):
    def test_expired_hold_is_free_at_read_time_without_sweeper(self):
        ev = self.new_event(seats=SEATS, hold_ttl_seconds=1, checkout_extension_seconds=300,
                            max_hold_seconds=900, max_per_buyer=4)
        t1, t2 = self.S.token(ev, "early"), self.S.token(ev, "late")
        h1 = self.hold(ev, t1, seats=["A-1"])
        hid = h1.json["hold_id"]
        exp = parse_ts(h1.json["expires_at"])
        self.assertLessEqual(exp - time.time(), 1.5, f"hold_ttl_seconds=1 but {h1!r}")

        time.sleep(max(1.5, exp - time.time() + 0.3))

        h2 = self.c.post(f"/v1/events/{ev}/holds", {"seats": ["A-1"]}, token=t2)
        self.assertStatus(h2, 201, msg="second buyer after the first hold expired:")
        self.assertStatus(self.c.post(f"/v1/holds/{hid}/extend", token=t1), 409, "hold_expired",
                          msg="extend of the expired hold:")
        self.assertStatus(self.confirm(hid, t1, h1.json["amount"]), 409, "hold_expired",
                          msg="confirm of the expired hold:")
        self.assertStatus(self.c.get(f"/v1/holds/{hid}", token=t1), 409, "hold_expired",
                          msg="GET of the expired hold:")

        # The new holder is untouched by all of that, and nothing was booked.
        g = self.c.get(f"/v1/holds/{h2.json['hold_id']}", token=t2)
        self.assertStatus(g, 200)
        self.assertEqual(g.json.get("state"), "held", repr(g))
        self.assertEqual(self.S.sql_value(
            f"select count(*) from bookings where event_id = '{ev}'"), "0")

    def test_extend_is_capped_at_max_hold_seconds(self):
        ev = self.new_event(seats=SEATS, hold_ttl_seconds=5, checkout_extension_seconds=300,
                            max_hold_seconds=8, max_per_buyer=4)
        t = self.S.token(ev, "capped")
        h = self.hold(ev, t, seats=["A-2"])
        exp0 = parse_ts(h.json["expires_at"])
        created = exp0 - 5
        e = self.c.post(f"/v1/holds/{h.json['hold_id']}/extend", token=t)
        self.assertStatus(e, 200)
        exp1 = parse_ts(e.json["expires_at"])
        self.assertGreater(exp1, exp0, f"extend did not move expires_at: {h!r} {e!r}")
        self.assertLessEqual(exp1, created + 8 + 1.0,
                             f"extend went past created + max_hold_seconds (8 s): {h!r} {e!r}")
        g = self.c.get(f"/v1/holds/{h.json['hold_id']}", token=t)
        self.assertStatus(g, 200)
        self.assertEqual(parse_ts(g.json["expires_at"]), exp1, repr(g))

    def test_hold_get_extend_release_by_owner(self):
        ev = self.new_event(seats=SEATS, hold_ttl_seconds=60, checkout_extension_seconds=120,
                            max_hold_seconds=900, max_per_buyer=4)
        t, t3 = self.S.token(ev, "owner"), self.S.token(ev, "next")
        h = self.hold(ev, t, seats=["A-3", "A-4"])
        for f in ("hold_id", "event", "seats", "expires_at", "amount", "currency"):
            self.assertIn(f, h.json, repr(h))
        self.assertEqual(h.json["amount"], 24000, repr(h))
        self.assertEqual(h.json["currency"], "EUR", repr(h))
        self.assertEqual(sorted(h.json["seats"]), ["A-3", "A-4"], repr(h))
        hid = h.json["hold_id"]
        g = self.c.get(f"/v1/holds/{hid}", token=t)
        self.assertStatus(g, 200)
        self.assertEqual((g.json.get("hold_id"), g.json.get("event"), g.json.get("state")),
                         (hid, ev, "held"), repr(g))
        self.wait_json(f"/v1/events/{ev}/seats", lambda d: seat_state(d, "A-3") == "held"
                       and seat_state(d, "A-4") == "held", what="seat map: A-3, A-4 held")
        self.assertStatus(self.c.delete(f"/v1/holds/{hid}", token=t), 204)
        # Free again immediately (the seat map may lag; a hold may not).
        self.hold(ev, t3, seats=["A-3", "A-4"])
        self.assertStatus(self.c.get(f"/v1/holds/{hid}", token=t), 404, "unknown_hold")

class Ownership(stack.ReserveTestCase):
    def _setup(self):
        ev = self.new_event(seats=SEATS, hold_ttl_seconds=120, checkout_extension_seconds=300,
                            max_hold_seconds=900, max_per_buyer=4)
        owner, thief, third = (self.S.token(ev, s) for s in ("owner", "thief", "third"))
        h = self.hold(ev, owner, seats=["A-1"])
        return ev, owner, thief, third, h.json["hold_id"], h

    def _assert_unaffected(self, ev, owner, third, hid, h):
        g = self.c.get(f"/v1/holds/{hid}", token=owner)
        self.assertStatus(g, 200, msg="owner GET after the other buyer's attempts:")
        self.assertEqual(g.json.get("state"), "held", repr(g))
        self.assertEqual(g.json.get("expires_at"), h.json["expires_at"],
                         f"expires_at changed: {h!r} → {g!r}")
        r = self.c.post(f"/v1/events/{ev}/holds", {"seats": ["A-1"]}, token=third)
        self.assertStatus(r, 409, "seat_unavailable", msg="seat must still be held:")

    def test_only_owner_can_release_or_extend(self):
        ev, owner, thief, third, hid, h = self._setup()
        time.sleep(1.1)   # so that an extension by anyone would visibly move expires_at
        self.assertStatus(self.c.delete(f"/v1/holds/{hid}", token=thief), 404, "unknown_hold",
                          msg="DELETE by another buyer:")
        self.assertStatus(self.c.post(f"/v1/holds/{hid}/extend", token=thief), 404,
                          "unknown_hold", msg="extend by another buyer:")
        self.assertStatus(self.c.get(f"/v1/holds/{hid}", token=thief), 404, "unknown_hold",
                          msg="GET by another buyer:")
        self._assert_unaffected(ev, owner, third, hid, h)

        e = self.c.post(f"/v1/holds/{hid}/extend", token=owner)
        self.assertStatus(e, 200, msg="extend by the owner:")
        self.assertGreater(parse_ts(e.json["expires_at"]), parse_ts(h.json["expires_at"]))
        self.assertStatus(self.c.delete(f"/v1/holds/{hid}", token=owner), 204)
        self.hold(ev, third, seats=["A-1"])

    def test_other_buyer_cannot_confirm(self):
        ev, owner, thief, third, hid, h = self._setup()
        r = self.confirm(hid, thief, h.json["amount"])
        self.assertStatus(r, 404, "unknown_hold", msg="confirm by another buyer:")
        self._assert_unaffected(ev, owner, third, hid, h)
        self.assertEqual(self.S.sql_value(
            f"select count(*) from bookings where event_id = '{ev}'"), "0")

    def test_unknown_hold_id(self):
        ev = self.new_event(seats=SEATS)
        t = self.S.token(ev, "someone")
        bogus = uuid.uuid4().hex
        for method, path in (("GET", f"/v1/holds/{bogus}"), ("DELETE", f"/v1/holds/{bogus}"),
                             ("POST", f"/v1/holds/{bogus}/extend")):
            self.assertStatus(self.c.request(method, path, token=t), 404, "unknown_hold",
                              msg=f"{method} {path}:")


class Limits(stack.ReserveTestCase):
    def test_max_per_buyer(self):
        ev = self.new_event(seats=SEATS, pools=[{"id": "ga", "capacity": 50, "price": 10}],
                            max_per_buyer=4)
        t = self.S.token(ev, "greedy")
        self.hold(ev, t, seats=["A-1", "A-2", "A-3"])
        r = self.c.post(f"/v1/events/{ev}/holds", {"seats": ["A-4", "A-5"]}, token=t)
        self.assertStatus(r, 429, "limit_exceeded")
        self.assertEqual(r.json.get("max_per_buyer"), 4, repr(r))
        r = self.c.post(f"/v1/events/{ev}/holds", {"pool": "ga", "quantity": 2}, token=t)
        self.assertStatus(r, 429, "limit_exceeded")
        self.hold(ev, t, pool="ga", quantity=1)
        # The refused holds took nothing.
        other = self.S.token(ev, "other")
        self.hold(ev, other, seats=["A-4", "A-5"])


class IdempotentCreate(stack.ReserveTestCase):
    """docs/api.md v1.1: a hold create that timed out on the client's side
    but ran is retried with the same Idempotency-Key: the same hold comes back (200) and
    the buyer is not blocked by an invisible hold of their own."""

    def post(self, ev, tok, body, key):
        return self.c.post(f"/v1/events/{ev}/holds", body, token=tok,
                           headers={"Idempotency-Key": key})

    def test_same_key_same_body_same_hold_other_body_422(self):
        ev = self.new_event(seats=SEATS, pools=[{"id": "fl", "capacity": 5, "price": 100}],
                            max_per_buyer=2)
        t = self.S.token(ev, "retrier")
        key = uuid.uuid4().hex
        first = self.post(ev, t, {"seats": ["A-1", "A-2"]}, key)
        self.assertStatus(first, 201)
        again = self.post(ev, t, {"seats": ["A-1", "A-2"]}, key)
        self.assertStatus(again, 200, msg="the retry answers the hold taken first:")
        self.assertEqual(again.json["hold_id"], first.json["hold_id"])
        self.assertEqual(again.json["expires_at"], first.json["expires_at"])
        self.assertStatus(self.post(ev, t, {"seats": ["A-3"]}, key), 422,
                          "idempotency_key_reused")
        # The limit of 2 counts the one hold, not two.
        self.assertStatus(self.post(ev, t, {"seats": ["A-3"]}, uuid.uuid4().hex), 429,
                          "limit_exceeded")
        # Another buyer's same key is their own request.
        other = self.post(ev, self.S.token(ev, "other"), {"seats": ["A-4"]}, key)
        self.assertStatus(other, 201)
        # Pools too; a malformed key is a 400.
        t2 = self.S.token(ev, "pooler")
        p1 = self.post(ev, t2, {"pool": "fl", "quantity": 2}, "k-pool")
        self.assertStatus(p1, 201)
        p2 = self.post(ev, t2, {"quantity": 2, "pool": "fl"}, "k-pool")
        self.assertStatus(p2, 200)
        self.assertEqual(p2.json["hold_id"], p1.json["hold_id"])
        self.assertStatus(self.post(ev, t2, {"pool": "fl", "quantity": 1}, "bad key\x01"), 400,
                          "invalid_request")
        a = self.c.get(f"/v1/events/{ev}/availability")
        self.assertEqual(stack.pool_available(a.json, "fl"), 3, repr(a))
