"""The API contract: docs/openapi/*.yaml are valid OpenAPI 3.1 (Redocly's
linter, pinned in tests/openapi/package.json) and true to the code: every documented
operation is called against a running stack (gateway, reserve, Redis, Postgres, payment
simulator), and every answer's status must be documented for that operation and its body
valid against the documented schema (JSON Schema 2020-12, python3-jsonschema).

A new route documented without a call here fails test_every_operation_was_called; an
answer the documents do not list (status, media type or body) fails the walk.

Admin routes are called on each service's admin listener when `deploy/onsale env` exports
ONSALE_GATEWAY_ADMIN_URL / ONSALE_RESERVE_ADMIN_URL, else on the main listener.

The lint test skips, with the reason, only when node or tests/openapi/node_modules are
missing (`npm ci` in tests/openapi; `deploy/onsale test` installs it).
"""

import copy
import hashlib
import itertools
import os
import re
import shutil
import subprocess
import unittest
import urllib.parse
import uuid

import jsonschema
import yaml

import stack

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.environ.get("ONSALE_SOURCE_DIR", os.path.join(HERE, "..", "..")))
DOCS = os.path.join(SOURCE, "docs", "openapi")
LINT_DIR = os.path.join(SOURCE, "tests", "openapi")
NODE = shutil.which("node") or shutil.which("nodejs")
REDOCLY = os.path.join(LINT_DIR, "node_modules", ".bin", "redocly")
DOC_NAMES = ("gateway-public", "gateway-admin", "reserve-public", "reserve-admin")
METHODS = ("get", "put", "post", "patch", "delete")


_zero_bits = stack.pow_example.leading_zero_bits  # docs/api.md, "Proof of work"


def load_docs():
    out = {}
    for name in DOC_NAMES:
        with open(os.path.join(DOCS, f"{name}.yaml"), encoding="utf-8") as f:
            out[name] = yaml.safe_load(f)
    return out


def resolve(doc, node, depth=0):
    """node with every local $ref inlined (the documents have no recursive schemas)."""
    if depth > 50:
        raise ValueError("$ref nesting too deep")
    if isinstance(node, dict):
        if "$ref" in node:
            ref = node["$ref"]
            if not ref.startswith("#/"):
                raise ValueError(f"only local $refs are used: {ref}")
            target = doc
            for part in ref[2:].split("/"):
                target = target[part.replace("~1", "/").replace("~0", "~")]
            merged = resolve(doc, copy.deepcopy(target), depth + 1)
            rest = {k: v for k, v in node.items() if k != "$ref"}
            if rest:
                merged = {"allOf": [merged, resolve(doc, rest, depth + 1)]}
            return merged
        return {k: resolve(doc, v, depth + 1) for k, v in node.items()}
    if isinstance(node, list):
        return [resolve(doc, v, depth + 1) for v in node]
    return node


def template_regex(path):
    """'/v1/holds/{hold_id}/extend' → a regex matching concrete paths."""
    out = "^"
    for part in re.split(r"(\{[^}]+\})", path):
        out += "[^/]+" if part.startswith("{") else re.escape(part)
    return re.compile(out + "$")


class Contract:
    """The four documents, their operations, and what the walk has covered."""

    def __init__(self):
        self.docs = load_docs()
        self.ops = {}  # (doc, method, template) -> resolved operation
        for name, doc in self.docs.items():
            for template, item in doc["paths"].items():
                for m in METHODS:
                    if m in item:
                        self.ops[(name, m, template)] = resolve(doc, item[m])
        self.called = set()

    def match(self, doc, method, path):
        """The operation key of a concrete request; the most specific template wins
        (fewest parameters: /shop/config.json before /shop/{file})."""
        found = [k for k in self.ops if k[0] == doc and k[1] == method.lower()
                 and template_regex(k[2]).match(path)]
        found.sort(key=lambda k: k[2].count("{"))
        return found[0] if found else None


def setUpModule():
    s = stack.module_stack("openapi")
    env = s.env()
    p = subprocess.run([s.script, "env"], env=env, capture_output=True, text=True, timeout=60)
    admin = {}
    for line in p.stdout.splitlines():
        m = re.match(r"export (ONSALE_(GATEWAY|RESERVE)_ADMIN_URL)=['\"]?([^'\"]+)", line)
        if m:
            admin[m.group(2).lower()] = urllib.parse.urlsplit(m.group(3)).port
    s.openapi_admin_ports = admin


class Lint(unittest.TestCase):
    def test_redocly_lint_passes(self):
        if NODE is None:
            self.skipTest("node is not installed (apt-get install nodejs npm)")
        if not os.access(REDOCLY, os.X_OK):
            self.skipTest("the linter is not installed: run `npm ci` in tests/openapi")
        files = [os.path.join(DOCS, f"{n}.yaml") for n in DOC_NAMES]
        p = subprocess.run([REDOCLY, "lint", "--config", os.path.join(LINT_DIR, "redocly.yaml"),
                            *files], cwd=LINT_DIR, capture_output=True, text=True, timeout=300,
                           stdin=subprocess.DEVNULL)
        self.assertEqual(p.returncode, 0, f"redocly lint:\n{p.stdout[-6000:]}\n{p.stderr[-2000:]}")

    def test_documents_are_openapi_3_1(self):
        for name, doc in load_docs().items():
            self.assertEqual(doc["openapi"], "3.1.0", name)
            self.assertTrue(doc["paths"], name)


class Walk(unittest.TestCase):
    """Calls every documented operation; each answer is checked against the documents."""

    maxDiff = 4000
    C = None

    @classmethod
    def setUpClass(cls):
        cls.C = Contract()

    @property
    def S(self):
        return stack._CURRENT

    def port(self, doc):
        service, side = doc.split("-")
        if side == "admin" and service in self.S.openapi_admin_ports:
            return self.S.openapi_admin_ports[service]
        return self.S.gateway_port if service == "gateway" else self.S.reserve_port

    def call(self, doc, method, path, status, token=None, body=None, headers=None):
        """One request; asserts status == the expected one, that it is documented, and that
        the body matches the documented schema. Returns the Response."""
        key = self.C.match(doc, method, urllib.parse.urlsplit(path).path)
        self.assertIsNotNone(key, f"{method} {path} is not documented in {doc}.yaml")
        c = stack.Client(self.port(doc), self.S.ctx)
        try:
            r = c.request(method, path, body=body, token=token, headers=headers)
        finally:
            c.close()
        self.assertEqual(r.status, status, f"{doc}: {method} {path}: {r!r}")
        op = self.C.ops[key]
        responses = op.get("responses", {})
        self.assertIn(str(r.status), responses,
                      f"{doc}: {method} {key[2]} answered {r.status}, which is not documented: {r!r}")
        resp = responses[str(r.status)]
        content = resp.get("content")
        ctype = (r.header("content-type") or "").split(";")[0].strip()
        if not content:
            self.assertEqual(r.body, b"", f"{doc}: {method} {key[2]} {r.status} has no documented body")
        else:
            self.assertIn(ctype, content, f"{doc}: {method} {key[2]} {r.status}: media type {ctype!r} "
                                          f"not among {sorted(content)}")
            schema = content[ctype].get("schema")
            if ctype.endswith("json") and schema is not None:
                self.assertIsNotNone(r.json, f"{method} {path}: not JSON: {r!r}")
                errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(r.json),
                                key=lambda e: list(e.path))
                self.assertFalse(errors, f"{doc}: {method} {key[2]} {r.status}: the body does not "
                                         f"match the schema:\n" +
                                 "\n".join(f"  at {list(e.path)}: {e.message}" for e in errors[:8]) +
                                 f"\nbody: {r.body[:1500]!r}")
        self.C.called.add(key)
        return r

    # --- the walk, service by service --------------------------------------------------

    def test_1_reserve(self):
        S, adm = self.S, self.S.admin_token
        pub, admin = "reserve-public", "reserve-admin"
        ev = stack.new_id("oa")
        inv = {"sections": [{"id": "A", "rows": 2, "seats_per_row": 6, "price": 5000}],
               "pools": [{"id": "floor", "capacity": 3, "price": 2000}], "currency": "EUR",
               "hold_ttl_seconds": 120, "checkout_extension_seconds": 300,
               "max_hold_seconds": 600, "max_per_buyer": 4}
        self.call(admin, "PUT", f"/admin/events/{ev}", 201, token=adm, body=inv)
        self.call(admin, "PUT", f"/admin/events/{ev}", 200, token=adm, body=inv)
        self.call(admin, "PUT", f"/admin/events/{ev}", 400, token=adm, body={"currency": 5})
        self.call(admin, "PUT", f"/admin/events/{ev}", 401, token="wrong", body=inv)
        self.call(admin, "GET", f"/admin/events/{ev}", 200, token=adm)
        self.call(admin, "GET", "/admin/events/no-such-event", 404, token=adm)
        self.call(admin, "GET", "/admin/events/bad%20id", 400, token=adm)
        self.call(admin, "GET", "/metrics", 200)

        self.call(pub, "GET", "/healthz", 200)
        self.call(pub, "GET", "/readyz", 200)
        t1, t2 = S.token(ev, "oa-buyer-1"), S.token(ev, "oa-buyer-2")
        self.call(pub, "GET", f"/v1/events/{ev}/availability", 200, token=t1)
        self.call(pub, "GET", f"/v1/events/{ev}/availability", 200)  # public: no token read
        self.call(pub, "GET", "/v1/events/no-such-event/availability", 404)
        self.call(pub, "GET", "/v1/events/bad%20id/availability", 400)
        self.call(pub, "GET", f"/v1/events/{ev}/seats", 200)
        self.call(pub, "GET", "/v1/events/no-such-event/seats", 404)
        h0 = f"/v1/events/{ev}/holds"
        self.call(pub, "POST", h0, 401, token="not-a-jwt", body={"seats": ["A-1-1"]})
        self.call(pub, "POST", h0, 403, token=S.token("other-ev", "x"), body={"seats": ["A-1-1"]})
        self.call(pub, "POST", "/v1/events/no-such-event/holds", 404,
                  token=S.token("no-such-event", "x"), body={"seats": ["A-1-1"]})

        holds = f"/v1/events/{ev}/holds"
        h = self.call(pub, "POST", holds, 201, token=t1, body={"seats": ["A-1-1", "A-1-2"]}).json
        self.call(pub, "POST", holds, 409, token=t2, body={"seats": ["A-1-2", "A-1-3"]})
        self.call(pub, "POST", holds, 404, token=t2, body={"seats": ["Z-9-9"]})
        self.call(pub, "POST", holds, 400, token=t2, body={"seats": "A-1-3"})
        self.call(pub, "POST", holds, 429, token=t2,
                  body={"seats": ["A-2-1", "A-2-2", "A-2-3", "A-2-4", "A-2-5"]})
        self.call(pub, "POST", holds, 409, token=t2, body={"pool": "floor", "quantity": 4})
        hk = {"Idempotency-Key": uuid.uuid4().hex}
        g = self.call(pub, "POST", holds, 201, token=t2, body={"pool": "floor", "quantity": 1},
                      headers=hk).json
        again = self.call(pub, "POST", holds, 200, token=t2,
                          body={"pool": "floor", "quantity": 1}, headers=hk).json
        self.assertEqual(again["hold_id"], g["hold_id"])
        self.call(pub, "POST", holds, 422, token=t2, body={"pool": "floor", "quantity": 2},
                  headers=hk)
        t3 = S.token(ev, "oa-buyer-3")  # best available
        b = self.call(pub, "POST", holds, 201, token=t3, body={"section": "A", "quantity": 2})
        self.assertEqual(len(b.json["seats"]), 2)
        self.call(pub, "POST", holds, 404, token=t3, body={"section": "Z", "quantity": 1})
        self.call(pub, "POST", holds, 400, token=t3, body={"section": "A", "quantity": 0})
        self.call(pub, "DELETE", f"/v1/holds/{b.json['hold_id']}", 204, token=t3)

        hid = h["hold_id"]
        self.call(pub, "GET", f"/v1/holds/{hid}", 200, token=t1)
        self.call(pub, "GET", f"/v1/holds/{hid}", 404, token=t2)
        self.call(pub, "GET", f"/v1/holds/{hid}", 401, token="x")
        self.call(pub, "POST", f"/v1/holds/{hid}/extend", 200, token=t1)
        self.call(pub, "POST", f"/v1/holds/{uuid.uuid4().hex}.{ev}/extend", 404, token=t1)
        confirm = f"/v1/holds/{hid}/confirm"
        pay = {"payment": {"amount": h["amount"], "currency": "EUR", "source": "tok_visa"}}
        self.call(pub, "POST", confirm, 400, token=t1, body=pay)  # no Idempotency-Key
        key = uuid.uuid4().hex
        b = self.call(pub, "POST", confirm, 201, token=t1, body=pay,
                      headers={"Idempotency-Key": key}).json
        self.call(pub, "POST", confirm, 200, token=t1, body=pay, headers={"Idempotency-Key": key})
        other = {"payment": {"amount": h["amount"], "currency": "EUR", "source": "tok_mastercard"}}
        self.call(pub, "POST", confirm, 422, token=t1, body=other, headers={"Idempotency-Key": key})
        self.call(pub, "POST", confirm, 409, token=t1, body=pay,
                  headers={"Idempotency-Key": uuid.uuid4().hex})  # hold_converted
        self.call(pub, "GET", f"/v1/holds/{hid}", 200, token=t1)  # state converted
        self.call(pub, "DELETE", f"/v1/holds/{hid}", 409, token=t1)
        self.call(pub, "GET", f"/v1/checkouts/{b['checkout_id']}", 200, token=t1)
        self.call(pub, "GET", f"/v1/checkouts/{b['checkout_id']}", 404, token=t2)

        gid = g["hold_id"]
        declined = {"payment": {"amount": g["amount"], "currency": "EUR",
                                "source": "tok_chargeDeclined"}}
        self.call(pub, "POST", f"/v1/holds/{gid}/confirm", 402, token=t2, body=declined,
                  headers={"Idempotency-Key": uuid.uuid4().hex})
        self.call(pub, "DELETE", f"/v1/holds/{gid}", 204, token=t2)
        self.call(pub, "DELETE", f"/v1/holds/{gid}", 404, token=t2)
        done = f"/v1/events/{ev}/done"
        self.call(pub, "POST", done, 200, token=t2)
        self.call(pub, "POST", done, 401, token="not-a-jwt")
        self.call(pub, "POST", done, 403, token=S.token("other-ev", "x"))
        self.call(pub, "POST", "/v1/events/bad%20id/done", 400, token=t2)
        # the stack's webhook secret is the simulator's: a forged signature is refused
        # (test_reserve_webhooks walks the rest)
        self.call(pub, "POST", "/v1/provider/webhook", 400, body={"id": "evt_1", "type": "x"},
                  headers={"Stripe-Signature": "t=1,v1=" + "0" * 64})

        self.call(admin, "GET", "/admin/checkouts", 200, token=adm)
        self.call(admin, "GET", f"/admin/checkouts?state=failed&event={ev}&older_than_seconds=0",
                  200, token=adm)
        self.call(admin, "GET", "/admin/checkouts?limit=0", 400, token=adm)
        self.call(admin, "GET", "/admin/checkouts", 401)
        self.call(admin, "GET", "/admin/config", 200, token=adm)
        self.call(admin, "GET", "/admin/config", 401)

        bid = S.sql_value(f"select booking_id from bookings where checkout_id = "
                          f"'{b['checkout_id']}'")
        self.call(admin, "GET", f"/admin/bookings?checkout_id={b['checkout_id']}", 200, token=adm)
        self.call(admin, "GET", "/admin/bookings", 400, token=adm)
        self.call(admin, "GET", "/admin/bookings", 401)
        self.call(admin, "GET", f"/admin/bookings/{bid}", 200, token=adm)
        self.call(admin, "GET", "/admin/bookings/bk_none", 404, token=adm)
        self.call(admin, "GET", "/admin/bookings/%20", 400, token=adm)
        self.call(admin, "GET", f"/admin/bookings/{bid}", 401)
        item = f"/admin/bookings/{bid}/items/A-1-2/refund"
        self.call(admin, "POST", item, 200, token=adm)
        self.call(admin, "POST", item, 409, token=adm)
        self.call(admin, "POST", f"/admin/bookings/{bid}/items/Z-9/refund", 404, token=adm)
        self.call(admin, "POST", f"/admin/bookings/{bid}/items/bad%20unit/refund", 400, token=adm)
        self.call(admin, "POST", item, 401)
        self.call(admin, "POST", item, 413, token=adm, body={"x": "y" * 100})
        cancel = f"/admin/bookings/{bid}/cancel"
        self.call(admin, "POST", cancel, 200, token=adm)
        self.call(admin, "POST", cancel, 200, token=adm)
        self.call(admin, "POST", "/admin/bookings/bk_none/cancel", 404, token=adm)
        self.call(admin, "POST", "/admin/bookings/%20/cancel", 400, token=adm)
        self.call(admin, "POST", cancel, 413, token=adm, body={"x": "y" * 100})
        self.call(admin, "POST", cancel, 401)
        self.call(admin, "GET", "/office/", 200)
        self.call(admin, "GET", "/office/office.js", 200)
        self.call(admin, "GET", "/office/office.css", 200)
        self.call(admin, "GET", "/office/nope.txt", 404)
        for what in ("bookings", "reconciliation"):
            self.call(admin, "GET", f"/admin/events/{ev}/{what}.csv", 200, token=adm)
            self.call(admin, "GET", f"/admin/events/no-such-event/{what}.csv", 404, token=adm)
            self.call(admin, "GET", f"/admin/events/bad%20id/{what}.csv", 400, token=adm)
            self.call(admin, "GET", f"/admin/events/{ev}/{what}.csv", 401)

        self.call(pub, "GET", "/shop/?event=demo", 200)
        self.call(pub, "GET", "/shop/shop.js", 200)
        self.call(pub, "GET", "/shop/shop.css", 200)
        self.call(pub, "GET", "/shop/nope.txt", 404)
        self.call(pub, "GET", "/shop/config.json", 200)

    def test_2_gateway(self):
        S, adm = self.S, self.S.gateway_admin_token
        pub, admin = "gateway-public", "gateway-admin"
        ev = stack.new_id("oa-room")
        room = {"rate_per_minute": 600, "max_active": 0, "mode": "fifo",
                "redirect_url": f"https://127.0.0.1:{S.reserve_port}/shop/?event={ev}"}
        self.call(admin, "PUT", f"/admin/events/{ev}", 201, token=adm, body=room)
        self.call(admin, "PUT", f"/admin/events/{ev}", 200, token=adm, body=room)
        self.call(admin, "PUT", f"/admin/events/{ev}", 400, token=adm, body={"rate_per_minute": -1})
        self.call(admin, "PATCH", f"/admin/events/{ev}", 200, token=adm, body={"paused": True})
        self.call(admin, "PATCH", "/admin/events/no-such-room", 404, token=adm, body={"paused": True})
        self.call(admin, "GET", f"/admin/events/{ev}", 200, token=adm)
        self.call(admin, "GET", "/admin/events/no-such-room", 404, token=adm)
        self.call(admin, "GET", "/admin/events", 200, token=adm)
        self.call(admin, "GET", "/admin/events", 401, token="wrong")
        self.call(admin, "GET", "/admin/config", 200, token=adm)
        self.call(admin, "GET", "/admin/config", 401)
        self.call(admin, "GET", "/admin/", 200)
        self.call(admin, "GET", "/metrics", 200)

        self.call(pub, "GET", "/healthz", 200)
        self.call(pub, "GET", "/readyz", 200)
        self.call(pub, "GET", "/.well-known/jwks.json", 200)
        self.call(pub, "GET", f"/q/{ev}", 200)
        self.call(pub, "GET", "/q/no-such-room", 404)
        j = self.call(pub, "POST", f"/q/{ev}/join", 201, body={}).json
        self.assertEqual(j["state"], "queued")
        self.call(pub, "POST", f"/q/{ev}/join", 200, token=j["ticket"], body={})
        self.call(pub, "POST", f"/q/{ev}/join", 401, token="forged.ticket", body={})
        self.call(pub, "POST", "/q/no-such-room/join", 404, body={})
        self.call(pub, "POST", "/q/bad%20id/join", 400, body={})
        self.call(pub, "GET", f"/q/{ev}/status", 200, token=j["ticket"])
        self.call(pub, "GET", f"/q/{ev}/status", 401)
        self.walk_pow(pub, admin, adm)
        self.walk_codes(pub, admin, adm)
        self.walk_enqueue(pub, admin, adm)
        self.walk_stock(pub, admin, adm)
        self.call(admin, "GET", f"/admin/events/{ev}/history", 200, token=adm)
        self.call(admin, "GET", "/admin/events/no-such-room/history", 404, token=adm)
        self.call(admin, "PATCH", f"/admin/events/{ev}", 200, token=adm, body={"paused": False})

        # The fan polls (every answer checked against the contract) until admitted. Each
        # connection lands on one of the gateway's workers, and each worker's view of the
        # watermark is its own, refreshed every tick (gw_watermark.h): one worker may say
        # "admitted" a tick before the other, so the admitted answer is the one asserted
        # on, not a second request that may meet the other worker's older view.
        def admitted():
            r = self.call(pub, "GET", f"/q/{ev}/status", 200, token=j["ticket"])
            return r.json if r.json.get("state") == "admitted" else None
        a = stack.wait_for(admitted, 30, interval=0.5, what="admission")
        self.assertEqual(a["state"], "admitted")
        self.assertEqual(a["redirect_url"], room["redirect_url"])

        self.call(admin, "PUT", f"/admin/events/{ev}", 200, token=adm,
                  body={**room, "sold_out": True})
        self.call(pub, "POST", f"/q/{ev}/join", 410, body={})
        self.call(admin, "DELETE", f"/admin/events/{ev}", 200, token=adm)
        self.call(admin, "DELETE", f"/admin/events/{ev}", 404, token=adm)

    def walk_stock(self, pub, admin, adm):
        """A room following the reserve's stock: "left" in the queued answer, then every seat
        held — the kept place ("sold_out" with returns_possible) and the refused join."""
        S = self.S
        ev = stack.new_id("oa-stock")
        self.call("reserve-admin", "PUT", f"/admin/events/{ev}", 201, token=S.admin_token,
                  body={"sections": [{"id": "A", "rows": 1, "seats_per_row": 1, "price": 900}],
                        "currency": "EUR", "hold_ttl_seconds": 120})
        self.call(admin, "PUT", f"/admin/events/{ev}", 201, token=adm,
                  body={"rate_per_minute": 600, "paused": True, "mode": "fifo",
                        "show_left": True})
        self.call("reserve-public", "GET", f"/v1/events/{ev}/availability", 200)
        j = self.call(pub, "POST", f"/q/{ev}/join", 201, body={}).json

        def told(pred):
            def check():
                r = self.call(pub, "GET", f"/q/{ev}/status", 200, token=j["ticket"])
                return r.json if pred(r.json) else None
            return stack.wait_for(check, 10, interval=0.2, what="the stock in the answer")
        told(lambda b: b.get("left") == 1)
        self.call("reserve-public", "POST", f"/v1/events/{ev}/holds", 201,
                  token=S.token(ev, "oa-walk-in"), body={"seats": ["A-1-1"]})
        b = told(lambda b: b["state"] == "sold_out")
        self.assertEqual((b["returns_possible"], b["held"]), (True, 1), b)
        self.call(pub, "POST", f"/q/{ev}/join", 410, body={})
        st = self.call(admin, "GET", f"/admin/events/{ev}", 200, token=adm).json["stats"]
        self.assertEqual((st["stock_left"], st["stock_held"]), (0, 1), st)
        self.call(admin, "DELETE", f"/admin/events/{ev}", 200, token=adm)

    def walk_pow(self, pub, admin, adm):
        """A room with proof of work: the challenge, the worker, and every join answer."""
        ev = stack.new_id("oa-pow")
        self.call(admin, "PUT", f"/admin/events/{ev}", 201, token=adm,
                  body={"rate_per_minute": 600, "pow": True})
        self.call(pub, "GET", f"/q/{ev}/pow.js", 200)
        self.call(pub, "GET", "/q/bad%20id/challenge", 400)
        ch = self.call(pub, "GET", f"/q/{ev}/challenge", 200).json
        self.call(pub, "POST", f"/q/{ev}/join", 428, body={})
        self.call(pub, "POST", f"/q/{ev}/join", 400, body={}, headers={"Onsale-Pow": "x.1"})
        c = ch["challenge"]
        wrong = next(str(i) for i in itertools.count()
                     if _zero_bits(hashlib.sha256((c + str(i)).encode()).digest()) < ch["difficulty"])
        self.call(pub, "POST", f"/q/{ev}/join", 403, body={},
                  headers={"Onsale-Pow": f"{c}.{wrong}"})
        good = next(str(i) for i in itertools.count()
                    if _zero_bits(hashlib.sha256((c + str(i)).encode()).digest()) >= ch["difficulty"])
        self.call(pub, "POST", f"/q/{ev}/join", 201, body={}, headers={"Onsale-Pow": f"{c}.{good}"})
        self.call(pub, "POST", f"/q/{ev}/join", 409, body={}, headers={"Onsale-Pow": f"{c}.{good}"})
        self.call(admin, "DELETE", f"/admin/events/{ev}", 200, token=adm)

    def walk_enqueue(self, pub, admin, adm):
        """An invite-only room: joins without the sale site's token, with a malformed one,
        an expired one and a good one (signed with the local stack's sale-site key, as
        docs/examples/enqueue.py does)."""
        import sys
        sys.path.insert(0, os.path.join(SOURCE, "docs", "examples"))
        import enqueue
        key = enqueue.load_key(os.path.join(self.S.state, "keys", "sale-site-key.pem"))
        ev = stack.new_id("oa-enq")
        r = self.call(admin, "PUT", f"/admin/events/{ev}", 201, token=adm,
                      body={"rate_per_minute": 600, "invite_only": True})
        self.assertTrue(r.json["invite_only"])
        self.assertEqual(self.call(pub, "POST", f"/q/{ev}/join", 403, body={}).json["error"],
                         "enqueue_required")
        r = self.call(pub, "POST", f"/q/{ev}/join", 400, body={},
                      headers={"Onsale-Enqueue": "x.y.z"})
        self.assertEqual(r.json["error"], "enqueue_malformed")
        import time
        import jwt
        now = int(time.time())
        stale = jwt.encode({"iss": enqueue.ISSUER, "aud": enqueue.AUDIENCE, "sub": "oa-1",
                            "evt": ev, "jti": "oa-stale", "iat": now - 600, "exp": now - 120},
                           key, algorithm="ES256",
                           headers={"kid": enqueue.thumbprint(enqueue.jwk_of(key))})
        r = self.call(pub, "POST", f"/q/{ev}/join", 401, body={},
                      headers={"Onsale-Enqueue": stale})
        self.assertEqual(r.json["reason"], "expired")
        r = self.call(pub, "POST", f"/q/{ev}/join", 403, body={},
                      headers={"Onsale-Enqueue": enqueue.token(key, "oa-1", "another-room")})
        self.assertEqual(r.json["error"], "enqueue_wrong_room")
        self.call(pub, "POST", f"/q/{ev}/join", 201, body={},
                  headers={"Onsale-Enqueue": enqueue.token(key, "oa-1", ev)})
        self.call(admin, "DELETE", f"/admin/events/{ev}", 200, token=adm)

    def walk_codes(self, pub, admin, adm):
        """A room with a presale phase: its codes issued, exported, redeemed and revoked."""
        import time
        ev = stack.new_id("oa-codes")
        t = time.time()
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t - 60))
        self.call(admin, "PUT", f"/admin/events/{ev}", 201, token=adm, body={
            "rate_per_minute": 600, "phases": [{"name": "presale", "starts_at": at,
                                                "rate_per_minute": 600, "requires_code": True}]})
        base = f"/admin/events/{ev}/codes"
        self.call(admin, "POST", base, 201, token=adm, body={"phase": "presale", "count": 3})
        self.call(admin, "POST", base, 400, token=adm, body={"phase": "presale", "count": 0})
        self.call(admin, "POST", base, 409, token=adm, body={"phase": "nope", "count": 3})
        self.call(admin, "POST", base, 401, token="wrong", body={"phase": "presale", "count": 3})
        self.call(admin, "POST", "/admin/events/no-such-room/codes", 404, token=adm,
                  body={"phase": "presale", "count": 3})
        self.call(admin, "GET", base, 200, token=adm)
        self.call(admin, "GET", base, 401)
        csv_text = self.call(admin, "GET", f"{base}/1.csv?limit=2", 200, token=adm).body.decode()
        self.call(admin, "GET", f"{base}/1.csv?limit=0", 400, token=adm)
        self.call(admin, "GET", f"{base}/7.csv", 404, token=adm)
        self.call(admin, "GET", f"{base}/1.csv", 401)
        codes = [line.split(",")[0] for line in csv_text.split("\r\n")[1:] if line]
        self.call(pub, "POST", f"/q/{ev}/join", 403, body={})
        self.call(pub, "POST", f"/q/{ev}/join", 400, body={}, headers={"Onsale-Code": "nope"})
        self.call(pub, "POST", f"/q/{ev}/join", 201, body={}, headers={"Onsale-Code": codes[0]})
        self.call(pub, "POST", f"/q/{ev}/join", 409, body={}, headers={"Onsale-Code": codes[0]})
        self.call(admin, "POST", f"{base}/revoke", 200, token=adm, body={"codes": [codes[1]]})
        self.call(admin, "POST", f"{base}/revoke", 400, token=adm, body={})
        self.call(admin, "POST", f"{base}/revoke", 401, body={"batches": [1]})
        self.call(admin, "POST", "/admin/events/no-such-room/codes/revoke", 404, token=adm,
                  body={"batches": [1]})
        self.call(pub, "POST", f"/q/{ev}/join", 403, body={}, headers={"Onsale-Code": codes[1]})
        self.call(admin, "DELETE", f"/admin/events/{ev}", 200, token=adm)

    def test_3_every_operation_was_called(self):
        missing = sorted(set(self.C.ops) - self.C.called)
        self.assertFalse(missing, f"documented but never called by the walk: {missing}")


if __name__ == "__main__":
    unittest.main()
