"""PROXY protocol v2 in front of the gateway (common/cm_proxy, cm_http): a load balancer
in proxy_from names the fan, and the per-address join limit counts the fan, not the
balancer; a malformed header from proxy_from closes the connection, a header-less one is
the balancer's own; a header from an address not in proxy_from is never believed.
"""

import http.client
import socket
import ssl
import struct
import subprocess
import unittest

import gwstack
import stack
from stack import HOST

SIG = b"\r\n\r\n\x00\r\nQUIT\n"


def proxy_v2(src, sport=40000, dst="127.0.0.1", dport=443):
    body = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack(">HH", sport, dport)
    return SIG + bytes([0x21, 0x11]) + struct.pack(">H", len(body)) + body


class ProxiedConnection(http.client.HTTPSConnection):
    """HTTPS with raw bytes sent on the TCP connection before the TLS handshake."""

    def __init__(self, port, ctx, preamble):
        super().__init__(HOST, port, context=ctx, timeout=10)
        self.preamble, self.ctx = preamble, ctx

    def connect(self):
        sock = socket.create_connection((HOST, self.port), timeout=10)
        if self.preamble:
            sock.sendall(self.preamble)
        self.sock = self.ctx.wrap_socket(sock, server_hostname=HOST)


def post_join(gw, ev, preamble):
    c = ProxiedConnection(gw.port, gw.gs.S.ctx, preamble)
    try:
        c.request("POST", f"/q/{ev}/join", headers={"Host": f"{HOST}:{gw.port}"})
        r = c.getresponse()
        r.read()
        return r.status
    finally:
        c.close()


def setUpModule():
    gwstack.module_stack("gwproxy")


class ProxyProtocol(gwstack.GatewayTestCase):
    def gateway(self, **conf):
        g = self.GS.add_gateway(gwstack.new_id("px"), join_rate_per_ip=6, join_burst_per_ip=2,
                                **conf)
        self.addCleanup(lambda: (g.stop(), self.GS.gateways.remove(g)))
        return g

    def test_fan_address_from_header_feeds_the_join_limit(self):
        g = self.gateway(proxy_from="127.0.0.1")
        ev = self.new_room(rate_per_minute=1, paused=True)
        fan_a = proxy_v2("203.0.113.7")
        self.assertEqual([post_join(g, ev, fan_a) for _ in range(3)], [201, 201, 429])
        # another fan behind the same balancer has a budget of their own
        self.assertEqual(post_join(g, ev, proxy_v2("203.0.113.8", sport=40001)), 201)
        # the header may come in pieces
        c = ProxiedConnection(g.port, self.GS.S.ctx, None)
        sock = socket.create_connection((HOST, g.port), timeout=10)
        hdr = proxy_v2("203.0.113.9")
        for i in range(0, len(hdr), 5):
            sock.sendall(hdr[i:i + 5])
        c.sock = self.GS.S.ctx.wrap_socket(sock, server_hostname=HOST)
        c.request("POST", f"/q/{ev}/join", headers={"Host": f"{HOST}:{g.port}"})
        self.assertEqual(c.getresponse().status, 201)
        c.close()

    def test_malformed_header_from_proxy_from_closes_the_connection(self):
        g = self.gateway(proxy_from="127.0.0.0/8")
        ev = self.new_room(rate_per_minute=1, paused=True)
        bad = [
            b"PROXY TCP4 203.0.113.7 127.0.0.1 1 2\r\n",   # v1 text is not accepted
            SIG + bytes([0x21, 0x11, 0x00, 0x04]) + b"abcd",  # shorter than its addresses
            SIG + bytes([0x31, 0x11]) + struct.pack(">H", 12) + bytes(12),  # version 3
        ]
        for pre in bad:
            with self.assertRaises((ssl.SSLError, ConnectionError, OSError),
                                   msg=f"preamble {pre!r}"):
                post_join(g, ev, pre)
        # the gateway is unharmed and still serves proxied fans
        self.assertEqual(post_join(g, ev, proxy_v2("198.51.100.1")), 201)
        # a header-less connection from the balancer's host (its own probe) is served as
        # the balancer's address
        self.assertEqual([post_join(g, ev, b"") for _ in range(3)], [201, 201, 429])
        self.assertEqual(post_join(g, ev, proxy_v2("198.51.100.2")), 201)

    def test_header_from_other_addresses_is_not_believed(self):
        # proxy_from names someone else: our connection is a plain client, and a PROXY
        # header it sends is garbage in front of TLS, not a claim of another address
        g = self.gateway(proxy_from="192.0.2.10")
        ev = self.new_room(rate_per_minute=1, paused=True)
        with self.assertRaises((ssl.SSLError, ConnectionError, OSError)):
            post_join(g, ev, proxy_v2("203.0.113.50"))
        self.assertEqual([post_join(g, ev, b"") for _ in range(3)], [201, 201, 429])
        # and without proxy_from at all the same holds (the default)
        g2 = self.gateway()
        with self.assertRaises((ssl.SSLError, ConnectionError, OSError)):
            post_join(g2, ev, proxy_v2("203.0.113.51"))

    def test_bad_proxy_from_is_a_startup_error(self):
        port = stack._free_ports(1)[0]
        g = gwstack.Gateway(self.GS, gwstack.new_id("px"), port,
                            dict(self.GS.base_conf(port), proxy_from="10.0.0.0/33"))
        p = subprocess.run([self.GS.gateway_bin, "--config", g.conf_path], capture_output=True,
                           stdin=subprocess.DEVNULL, timeout=30)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(b'proxy_from: "10.0.0.0/33" is not an IP address or CIDR block', p.stderr)

if __name__ == "__main__":
    unittest.main()
