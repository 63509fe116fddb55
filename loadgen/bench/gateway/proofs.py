#!/usr/bin/env python3
"""Solved proof-of-work challenges for bench_gateway.sh --pow: COUNT lines of
"<challenge>.<nonce>" for EVENT, made with the gateway's own challenge key (derived from
its ticket secret, gateway/gw_server.c) for the loopback block, so the benchmark's joins
carry proofs the gateway accepts without a GET /q/{event}/challenge each. Difficulty 0 by
default (any nonce solves it: the gateway's work is the same at every difficulty).

    proofs.py --secret STATE/keys/ticket-secret --event E --count N [--bits B] [--ttl S]
"""

import argparse
import base64
import hashlib
import hmac
import os
import struct
import sys
import time

LABEL = b"onsale proof-of-work challenge key v1"  # gateway/gw_server.c pow_new()
BLOCK = b"4:127.0.0"  # gw_pow_block("127.0.0.1")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--secret", required=True)
    ap.add_argument("--event", required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--bits", type=int, default=0)
    ap.add_argument("--ttl", type=int, default=600)
    a = ap.parse_args()
    with open(a.secret, "rb") as f:
        key = hmac.new(f.read().strip(), LABEL, hashlib.sha256).digest()
    expires = struct.pack(">I", int(time.time()) + a.ttl)
    issuer = os.urandom(8)  # an issuer of its own: its serials are no gateway's
    out = sys.stdout
    for serial in range(a.count):
        head = bytes([2, a.bits]) + expires + issuer + struct.pack(">I", serial)
        mac = hmac.new(key, head + a.event.encode() + b"\0" + BLOCK, hashlib.sha256).digest()
        c = base64.urlsafe_b64encode(head + mac[:16]).rstrip(b"=").decode()
        n = 0
        while a.bits and int.from_bytes(hashlib.sha256(f"{c}{n}".encode()).digest(),
                                        "big") >> (256 - a.bits):
            n += 1
        out.write(f"{c}.{n}\n")


if __name__ == "__main__":
    main()
