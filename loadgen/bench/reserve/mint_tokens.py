#!/usr/bin/env python3
"""mint_tokens.py — many admission JWTs fast, shaped exactly like onsale-token's.

bench_reserve.sh needs tens of thousands of tokens per run (one buyer per pre-created
hold); onsale-token signs about a thousand a second here, this about 25,000. So that
the reserve sees the same tokens it would from the real signer, the header (alg, kid,
typ) and the claims (iss, aud, lifetime) are copied from a TEMPLATE token that
onsale-token printed for the same key; only sub, evt, jti and the times change.

  mint_tokens.py --key admission-1.pem --template TOKEN --event E --sub PREFIX \
                 --count N [--ttl SECONDS] > tokens.txt

prints N tokens, one a line, subs PREFIX-1 .. PREFIX-N. Needs python3-cryptography.
"""
import argparse
import base64
import json
import os
import sys
import time

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, utils


def b64url(data: bytes) -> bytes:
    return base64.urlsafe_b64encode(data).rstrip(b"=")


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--key", required=True, help="EC P-256 private key (PEM)")
    ap.add_argument("--template", required=True, help="a token from onsale-token")
    ap.add_argument("--event", required=True)
    ap.add_argument("--sub", required=True, help="subject prefix")
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--ttl", type=int, default=1800, help="seconds until exp")
    a = ap.parse_args()

    parts = a.template.strip().split(".")
    if len(parts) != 3:
        print("mint_tokens: --template is not a JWT", file=sys.stderr)
        return 2
    header = json.loads(unb64url(parts[0]))
    claims = json.loads(unb64url(parts[1]))
    if header.get("alg") != "ES256":
        print("mint_tokens: template is not ES256", file=sys.stderr)
        return 2
    with open(a.key, "rb") as f:
        key = serialization.load_pem_private_key(f.read(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        print("mint_tokens: --key is not an EC P-256 private key", file=sys.stderr)
        return 2

    head = b64url(json.dumps(header, separators=(",", ":"), sort_keys=True).encode())
    now = int(time.time())
    out = sys.stdout.buffer
    for i in range(1, a.count + 1):
        claims.update(sub="%s-%d" % (a.sub, i), evt=a.event, jti=os.urandom(16).hex(),
                      iat=now, nbf=now, exp=now + a.ttl)
        signing_input = head + b"." + b64url(
            json.dumps(claims, separators=(",", ":"), sort_keys=True).encode())
        r, s = utils.decode_dss_signature(key.sign(signing_input, ec.ECDSA(hashes.SHA256())))
        out.write(signing_input + b"." + b64url(r.to_bytes(32, "big") + s.to_bytes(32, "big"))
                  + b"\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
