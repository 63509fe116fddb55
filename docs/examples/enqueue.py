#!/usr/bin/env python3
"""The sale site's side of enqueue tokens (docs/api.md, "Enqueue tokens"): a key for the
site, the JWKS the gateways are given, a token per customer, and the two ways to send the
customer to the waiting room. Needs Debian's python3-jwt and python3-cryptography.

    # once: the site's key (keep site-key.pem on the site), the JWKS for the gateways
    python3 docs/examples/enqueue.py keys --key site-key.pem --jwks site-jwks.json
    #   gateway.conf: enqueue_keys_file = /etc/onsale/site-jwks.json
    #                 enqueue_issuer = https://shop.example

    # per customer: a token, then either a page that posts it (a browser) ...
    python3 docs/examples/enqueue.py form --key site-key.pem --customer cust-42 \\
        --event demo --gateway https://127.0.0.1:8443 > go.html
    # ... or a join from an app, which prints the customer's place
    python3 docs/examples/enqueue.py join --key site-key.pem --customer cust-42 \\
        --event demo --gateway https://127.0.0.1:8443 --ca .onsale/ca.pem

As a module: token(key_pem, customer, event, ...) -> the JWT text.
"""

import argparse
import html
import json
import ssl
import sys
import time
import urllib.error
import urllib.request
import uuid

ISSUER = "https://shop.example"
AUDIENCE = "onsale-gateway"  # the gateways' enqueue_audience


def load_key(path):
    from cryptography.hazmat.primitives import serialization
    with open(path, "rb") as f:
        return serialization.load_pem_private_key(f.read(), password=None)


def jwk_of(key):
    """The public half of key as a JWK. x and y are written at their full 32 bytes, as RFC
    7518 requires (some JWT libraries drop a leading zero byte: about one key in 128 would
    then be refused by the gateways)."""
    import base64
    n = key.public_key().public_numbers()

    def b64(v):
        return base64.urlsafe_b64encode(v.to_bytes(32, "big")).rstrip(b"=").decode()
    return {"kty": "EC", "crv": "P-256", "x": b64(n.x), "y": b64(n.y)}


def thumbprint(jwk):
    """The RFC 7638 thumbprint of an EC key: its kid, the gateways find the key by it."""
    import base64
    import hashlib
    canon = json.dumps({k: jwk[k] for k in ("crv", "kty", "x", "y")}, separators=(",", ":"),
                       sort_keys=True)
    return base64.urlsafe_b64encode(hashlib.sha256(canon.encode()).digest()).rstrip(b"=").decode()


def make_keys(key_path, jwks_path):
    """A new P-256 key for the site (owner-only) and the JWKS of its public half."""
    import os
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    jwk = jwk_of(key)
    jwk.update(kid=thumbprint(jwk), use="sig", alg="ES256")
    with open(jwks_path, "w") as f:
        json.dump({"keys": [jwk]}, f, indent=1)
    return jwk["kid"]


def token(key, customer, event, issuer=ISSUER, audience=AUDIENCE, ttl=300):
    """The customer's enqueue token for event's room: short-lived (the gateways refuse any
    longer than their enqueue_max_lifetime_s), never reused for another room."""
    import jwt
    now = int(time.time())
    claims = {"iss": issuer, "aud": audience, "sub": customer, "evt": event,
              "jti": uuid.uuid4().hex, "iat": now, "exp": now + ttl}
    return jwt.encode(claims, key, algorithm="ES256", headers={"kid": thumbprint(jwk_of(key))})


def form(gateway, event, tok):
    """A page that sends the browser to the room with the token: the one cross-site join
    the gateway takes. It answers with the queue page and the customer's ticket."""
    action = html.escape(f"{gateway}/q/{event}/join", quote=True)
    return ("<!doctype html><meta charset=utf-8><title>To the waiting room</title>\n"
            f'<form method="post" action="{action}">\n'
            f'<input type="hidden" name="enqueue" value="{html.escape(tok, quote=True)}">\n'
            "<button>Go to the waiting room</button></form>\n"
            "<script>document.forms[0].submit()</script>\n")


def join(gateway, event, tok, ca=None):
    """An app's join with the token: (status, answer)."""
    ctx = ssl.create_default_context(cafile=ca)
    req = urllib.request.Request(f"{gateway}/q/{event}/join", data=b"{}", method="POST",
                                 headers={"Content-Type": "application/json",
                                          "Onsale-Enqueue": tok})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=("keys", "token", "form", "join"))
    p.add_argument("--key", required=True, help="the site's private key (PEM)")
    p.add_argument("--jwks", help="keys: where the gateways' JWKS goes")
    p.add_argument("--customer", help="the site's customer id (1-64 of A-Za-z0-9._@:+-)")
    p.add_argument("--event", help="the room's event id")
    p.add_argument("--gateway", default="https://127.0.0.1:8443")
    p.add_argument("--issuer", default=ISSUER)
    p.add_argument("--ca", help="the gateway's CA (a local stack: .onsale/ca.pem)")
    a = p.parse_args()
    if a.what == "keys":
        if not a.jwks:
            p.error("keys needs --jwks")
        print(make_keys(a.key, a.jwks))
        return 0
    if not (a.customer and a.event):
        p.error(f"{a.what} needs --customer and --event")
    tok = token(load_key(a.key), a.customer, a.event, issuer=a.issuer)
    if a.what == "token":
        print(tok)
    elif a.what == "form":
        sys.stdout.write(form(a.gateway, a.event, tok))
    else:
        status, answer = join(a.gateway, a.event, tok, a.ca)
        print(json.dumps({"status": status, **answer}))
        return 0 if status in (200, 201) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
