#!/usr/bin/env python3
"""An API client in a waiting room that binds tickets to keys ("dpop": true, docs/api.md):
make a P-256 key, join with a DPoP proof (the ticket is bound to the key), poll with a
fresh proof each time until admitted, and print the admission — its token names the key
in cnf.jkt. Needs python3-cryptography; otherwise the standard library.

    deploy/onsale up
    eval "$(deploy/onsale env)"
    python3 docs/examples/dpop_client.py --event demo-bound

Prints the states it sees and, last, one JSON line {"state", "cnf", "jkt", "expires_at"}.
Exit 0 when admitted, 1 otherwise (with the gateway's answer).
"""

import argparse
import base64
import hashlib
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, utils


def b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


class Key:
    """The client's key: it never leaves this process; only proofs do."""

    def __init__(self):
        self.private = ec.generate_private_key(ec.SECP256R1())
        n = self.private.public_key().public_numbers()
        self.jwk = {"kty": "EC", "crv": "P-256", "x": b64url(n.x.to_bytes(32, "big")),
                    "y": b64url(n.y.to_bytes(32, "big"))}
        self.skew = 0  # the gateway's clock minus ours, from its Date header

    def thumbprint(self):
        """RFC 7638: SHA-256 of the required members, sorted, without white space."""
        canon = json.dumps(self.jwk, separators=(",", ":"), sort_keys=True)
        return b64url(hashlib.sha256(canon.encode()).digest())

    def proof(self, method, url):
        """DPoP proof for one request: ES256 over {jti, htm, htu, iat}; htu without query."""
        u = urllib.parse.urlsplit(url)
        header = {"typ": "dpop+jwt", "alg": "ES256", "jwk": self.jwk}
        claims = {"jti": b64url(os.urandom(16)), "htm": method,
                  "htu": f"{u.scheme}://{u.netloc}{u.path}", "iat": int(time.time() + self.skew)}
        signing_input = (b64url(json.dumps(header).encode()) + "." +
                         b64url(json.dumps(claims).encode()))
        der = self.private.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256()))
        r, s = utils.decode_dss_signature(der)  # JOSE wants R || S, 32 bytes each
        return signing_input + "." + b64url(r.to_bytes(32, "big") + s.to_bytes(32, "big"))


def call(ctx, key, method, url, ticket=None):
    """(status, json) of one request carrying a fresh proof."""
    h = {"Accept": "application/json", "DPoP": key.proof(method, url)}
    if ticket:
        h["Authorization"] = f"Bearer {ticket}"
    req = urllib.request.Request(url, data=b"{}" if method == "POST" else None, headers=h,
                                 method=method)
    if method == "POST":
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
            status, body, date = r.status, r.read(), r.headers.get("Date")
    except urllib.error.HTTPError as e:
        status, body, date = e.code, e.read(), e.headers.get("Date")
    if date:
        from email.utils import parsedate_to_datetime
        key.skew = parsedate_to_datetime(date).timestamp() - time.time()
    try:
        return status, json.loads(body)
    except ValueError:
        return status, {"error": "not_json", "message": body[:200].decode("utf-8", "replace")}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--event", default="demo")
    p.add_argument("--timeout", type=float, default=300)
    a = p.parse_args()
    base, ca = os.environ["ONSALE_GATEWAY_URL"].rstrip("/"), os.environ["ONSALE_CA"]
    ctx = ssl.create_default_context(cafile=ca)
    key = Key()
    status, j = call(ctx, key, "POST", f"{base}/q/{a.event}/join")
    if status not in (200, 201):
        print(f"join: {status} {json.dumps(j)}", file=sys.stderr)
        return 1
    ticket = j["ticket"]
    print(f"joined: {j['state']}, position {j.get('position')}")
    deadline = time.monotonic() + a.timeout
    while j.get("state") != "admitted":
        if time.monotonic() > deadline:
            print("not admitted in time", file=sys.stderr)
            return 1
        time.sleep(max(0.2, min(j.get("poll_after_ms", 1000), 5000) / 1000))
        status, j = call(ctx, key, "GET", f"{base}/q/{a.event}/status", ticket)
        if status != 200:
            print(f"status: {status} {json.dumps(j)}", file=sys.stderr)
            return 1
        print(f"{j['state']}: position {j.get('position', '-')}")
    seg = j["admission_token"].split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(seg + "=" * (-len(seg) % 4)))
    print(json.dumps({"state": "admitted", "cnf": claims.get("cnf"), "jkt": key.thumbprint(),
                      "expires_at": j["expires_at"]}))
    return 0 if claims.get("cnf", {}).get("jkt") == key.thumbprint() else 1


if __name__ == "__main__":
    sys.exit(main())
