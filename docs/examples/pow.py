#!/usr/bin/env python3
"""Joining a waiting room that asks for a proof of work (docs/api.md, "Proof of work"),
standard library only.

    python3 docs/examples/pow.py --url https://127.0.0.1:8443 --event demo --ca .onsale/ca.pem

As a module: solve(challenge, difficulty) -> nonce, and join(api, event) with any
callable api(method, path, headers=...) -> (status, json) such as client.py's Api.
"""

import argparse
import hashlib
import itertools
import json
import ssl
import urllib.error
import urllib.request


def leading_zero_bits(digest):
    n = 0
    for byte in digest:
        if byte:
            return n + 8 - byte.bit_length()
        n += 8
    return n


def solve(challenge, difficulty):
    """The first decimal nonce with SHA-256(challenge ‖ nonce) ≥ difficulty zero bits.
    About 2**difficulty hashes: 16 bits take ~0.1 s here, each bit more twice that."""
    prefix = hashlib.sha256(challenge.encode("ascii"))  # the challenge hashed once
    for i in itertools.count():
        h = prefix.copy()
        h.update(str(i).encode("ascii"))
        if leading_zero_bits(h.digest()) >= difficulty:
            return str(i)


def join(api, event, tries=3):
    """POST /q/{event}/join, solving the room's challenge when it asks for one (a room
    without proof of work answers the first join directly). Returns (status, json)."""
    status, j = api("POST", f"/q/{event}/join")
    for _ in range(tries):
        if not (isinstance(j, dict) and str(j.get("error", "")).startswith("pow_") and "pow" in j):
            break
        ch = j["pow"]  # a fresh challenge comes with every refusal
        proof = f"{ch['challenge']}.{solve(ch['challenge'], ch['difficulty'])}"
        status, j = api("POST", f"/q/{event}/join", headers={"Onsale-Pow": proof})
    return status, j


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--event", required=True)
    ap.add_argument("--ca")
    a = ap.parse_args()
    ctx = ssl.create_default_context(cafile=a.ca)

    def api(method, path, headers=None):
        req = urllib.request.Request(a.url.rstrip("/") + path, data=b"{}", method=method,
                                     headers={"Content-Type": "application/json",
                                              **(headers or {})})
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    status, j = join(api, a.event)
    print(status, json.dumps(j))
    return 0 if status in (200, 201) else 1


if __name__ == "__main__":
    raise SystemExit(main())
