"""Redis over TLS. `ONSALE_REDIS_TLS=1 deploy/onsale up` runs Redis TLS-only
(port 0, tls-port, client certificates from the dev CA required); the reserve that
deploy/onsale configures and a gateway configured with the redis_tls* keys carry a real
sale through it: join → admission → hold → confirm, each as its own Redis ACL user."""

import os
import ssl

import gwstack
import stack


def setUpModule():
    gwstack.module_stack("redis-tls", gateways=1, redis_tls=True)


class RedisOverTLS(gwstack.GatewayTestCase):
    def test_redis_speaks_tls_only_and_wants_a_client_certificate(self):
        S = self.GS.S
        self.assertEqual(self.GS.redis("PING"), "PONG")  # TLS + client certificate
        self.assertEqual(self.GS.redis("CONFIG", "GET", "port"), [b"port", b"0"])
        plain = stack.Redis(S.redis_port, auth=S.redis_auth)
        with self.assertRaises((OSError, ConnectionError, RuntimeError)):
            plain("PING")
        plain.close()
        nocert = stack.Redis(S.redis_port, auth=S.redis_auth,
                             ssl_ctx=ssl.create_default_context(cafile=S.ca))
        with self.assertRaises((OSError, ConnectionError, RuntimeError)):
            nocert("PING")
        nocert.close()

    def test_sale_through_tls_redis(self):
        S = self.GS.S
        ev = gwstack.new_id("tls")
        S.create_event(ev, pools=[{"id": "floor", "capacity": 10, "price": 2500}],
                       max_per_buyer=4)
        r = self.GS.admin("PUT", f"/admin/events/{ev}", {"rate_per_minute": 600})
        self.assertIn(r.status, (200, 201), repr(r))
        ticket = self.join(ev).json["ticket"]

        def admitted():
            st = self.status(ev, ticket)
            return st if st.status == 200 and st.json.get("state") == "admitted" else None
        tok = stack.wait_for(admitted, 20, interval=0.1, what="admission").json[
            "admission_token"]

        rc = S.client()
        self.addCleanup(rc.close)
        h = rc.post(f"/v1/events/{ev}/holds", {"pool": "floor", "quantity": 2}, token=tok)
        self.assertStatus(h, 201, msg="hold:")
        cf = rc.post(f"/v1/holds/{h.json['hold_id']}/confirm",
                     {"payment": {"amount": h.json["amount"], "currency": "EUR",
                                  "source": "tok_visa"}},
                     token=tok, headers={"Idempotency-Key": os.urandom(8).hex()})
        self.assertStatus(cf, 201, msg="confirm:")
        self.assertEqual(cf.json["quantity"], 2)
        # the hold's state went through Redis: the event's keys are there, read over TLS
        self.assertTrue(S.redis.scan_keys(f"*{{{ev}}}*"), "no key of the event in Redis")
        # both services say how they reached Redis, each as its own ACL user
        with open(os.path.join(S.state, "log", f"{S.reserve_names[0]}.log")) as f:
            self.assertIn("connected over TLS (as onsale-reserve)", f.read())
        with open(self.GS.g.log_path) as f:
            self.assertIn("connected over TLS (as onsale-gateway)", f.read())

    def test_each_service_user_keeps_to_its_keys_over_tls(self):
        """The services' ACL users (docs/operations.md "Redis users") hold over TLS too:
        the reserve's cannot write a token record, the gateway's cannot read a hold."""
        S = self.GS.S
        ev = gwstack.new_id("tlsacl")
        for svc, cmd in (("reserve", ("SET", f"os:{{{ev}}}:tk:{'ab' * 32}", "1")),
                         ("gateway", ("GET", f"os:{{{ev}}}:h:x"))):
            r = stack.Redis(S.redis_port, auth=S.redis_service_auth[svc], ssl_ctx=S.redis_ssl)
            try:
                self.assertEqual(r("PING"), "PONG")
                with self.assertRaisesRegex(RuntimeError, "NOPERM", msg=f"{svc}: {cmd!r}"):
                    r(*cmd)
            finally:
                r.close()
