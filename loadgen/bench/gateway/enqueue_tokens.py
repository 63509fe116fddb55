#!/usr/bin/env python3
"""Enqueue tokens for bench_gateway.sh --enqueue: COUNT lines, each the token of a customer
of its own (PREFIX + a serial) for EVENT, signed with the stack's sale-site key the way the
sale site would (docs/examples/enqueue.py's token()), so every benchmark join takes a new
customer's place.

    enqueue_tokens.py --key STATE/keys/sale-site-key.pem --event E --count N [--prefix P]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "docs", "examples"))
import enqueue  # noqa: E402  (docs/examples/enqueue.py)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--key", required=True)
    ap.add_argument("--event", required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--prefix", default="c")
    a = ap.parse_args()
    key = enqueue.load_key(a.key)
    out = sys.stdout
    for i in range(a.count):
        out.write(enqueue.token(key, f"{a.prefix}{i}", a.event, ttl=900) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
