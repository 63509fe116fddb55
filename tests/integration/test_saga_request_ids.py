"""The request id carried on (docs/operations.md "Logs and request ids"):
"I paid, where is my ticket?" is one search.

- A confirm's X-Request-Id is stored with its checkout (checkouts.request_id), sent in the
  charge's metadata to the payment provider, carried by the reserve's log lines of the
  confirm, and finds the checkout in GET /admin/checkouts?request_id=.
- The gateway poll that admits a buyer puts its request id in the admission token (the
  rid claim, docs/tokens.md); the reserve logs it (admission=<rid>) under each request's
  own id — a token inspected against its record (the hold), verified (the confirm) or
  found in the token cache (a read) — and stores it with the checkout
  (checkouts.admission_request_id).

Real stack: gateway, reserve, Redis, Postgres and the payment simulator (a SagaStack, so
the reserve charges the simulator over HTTPS).
"""

import os
import unittest
import uuid

import stack
from stack import wait_for
from test_saga_flows import SagaCase, payment, saga_stack


def setUpModule():
    saga_stack("saga")


class RequestTrace(SagaCase):
    def log_lines(self, needle):
        out = []
        for name in self.S.reserve_names:
            with open(os.path.join(self.S.state, "log", f"{name}.log"), "rb") as f:
                out += [ln for ln in f.read().decode("utf-8", "replace").splitlines()
                        if needle in ln]
        return out

    def wait_log(self, *needles, what):
        def found():
            return [ln for ln in self.log_lines(needles[0]) if all(n in ln for n in needles)]
        return wait_for(found, 10, interval=0.1, what=what)

    def admin_find(self, rid):
        r = self.S.admin("GET", f"/admin/checkouts?request_id={rid}")
        self.assertStatus(r, 200, msg="GET /admin/checkouts?request_id=")
        return r.json["checkouts"]

    def confirm_with_id(self, hold, token, rid):
        return self.c.post(f"/v1/holds/{hold['hold_id']}/confirm", payment(hold["amount"]),
                           token=token,
                           headers={"Idempotency-Key": uuid.uuid4().hex, "X-Request-Id": rid})

    def test_confirm_request_id_reaches_the_row_the_charge_and_the_log(self):
        ev = self.new_event("rt", seats=[{"id": "A-1", "section": "A", "price": 1500}])
        token = self.S.token(ev, "rt-buyer")
        hold = self.hold(ev, token, seats=["A-1"]).json
        rid = f"fan-{uuid.uuid4().hex}"
        r = self.confirm_with_id(hold, token, rid)
        self.assertStatus(r, 201, msg="confirm:")
        self.assertEqual(r.header("X-Request-Id"), rid)
        cid = r.json["checkout_id"]

        row = self.S.sql(f"select coalesce(request_id, ''), coalesce(admission_request_id, '') "
                         f"from checkouts where checkout_id = '{cid}'")
        self.assertEqual([tuple(x) for x in row], [(rid, "")])

        charge = self.pay.intent_of(cid)
        self.assertIsNotNone(charge, "no PaymentIntent for the checkout")
        self.assertEqual(charge["status"], "succeeded", charge)
        self.assertEqual(charge["metadata"].get("request_id"), rid, charge)
        self.assertEqual(charge["metadata"].get("checkout"), cid, charge)

        self.wait_log(f"req={rid}", "access method=POST route=confirm status=201",
                      what="the confirm's access line under its request id")
        found = self.admin_find(rid)
        self.assertEqual([(c["checkout_id"], c["state"], c["request_id"]) for c in found],
                         [(cid, "confirmed", rid)])

    def test_admin_request_id_filter_rejects_insane_ids(self):
        for bad in ("a" * 65, "has%20space", "semi%3Bcolon", ""):
            r = self.S.admin("GET", f"/admin/checkouts?request_id={bad}")
            self.assertStatus(r, 400, "invalid_request", msg=f"request_id={bad!r}:")

    def test_admitting_poll_id_travels_in_the_token_to_the_hold_and_checkout(self):
        ev = stack.new_id("rta")
        r = self.S.gateway_admin("PUT", f"/admin/events/{ev}", {"rate_per_minute": 600})
        self.assertEqual(r.status, 201, repr(r))
        self.S.create_event(ev, seats=[{"id": "A-1", "section": "A", "price": 900}])
        g = stack.Client(self.S.gateway_port, self.S.ctx)
        self.addCleanup(g.close)
        ticket = g.post(f"/q/{ev}/join").json["ticket"]
        poll_id = f"poll-{uuid.uuid4().hex}"

        def admitted():
            r = g.get(f"/q/{ev}/status", token=ticket, headers={"X-Request-Id": poll_id})
            return r.status == 200 and r.json.get("state") == "admitted" and r.json
        token = wait_for(admitted, 20, interval=0.2, what="admission")["admission_token"]
        self.assertEqual(stack.jwt_parts(token)[1].get("rid"), poll_id)

        hold_id = f"hold-{uuid.uuid4().hex}"
        r = self.c.post(f"/v1/events/{ev}/holds", {"seats": ["A-1"]}, token=token,
                        headers={"X-Request-Id": hold_id})
        self.assertStatus(r, 201, msg="hold:")
        self.wait_log(f"req={hold_id}", f"admission={poll_id}",
                      what="the hold's line naming the admitting poll")

        confirm_id = f"buy-{uuid.uuid4().hex}"
        r = self.confirm_with_id(r.json, token, confirm_id)
        self.assertStatus(r, 201, msg="confirm:")
        cid = r.json["checkout_id"]
        self.wait_log(f"req={confirm_id}", f"admission={poll_id}",
                      what="the confirm's line naming the admitting poll")
        # a token the reserve verified already (its cache) is logged the same way
        read_id = f"read-{uuid.uuid4().hex}"
        r = self.c.get(f"/v1/checkouts/{cid}", token=token, headers={"X-Request-Id": read_id})
        self.assertStatus(r, 200, msg="read the checkout:")
        self.wait_log(f"req={read_id}", f"admission={poll_id}",
                      what="a cached token's line naming the admitting poll")
        self.assertEqual(self.S.sql_value(f"select admission_request_id from checkouts "
                                          f"where checkout_id = '{cid}'"), poll_id)
        found = self.admin_find(poll_id)
        self.assertEqual([(c["checkout_id"], c["request_id"], c["admission_request_id"])
                          for c in found], [(cid, confirm_id, poll_id)])


if __name__ == "__main__":
    unittest.main()
