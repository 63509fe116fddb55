"""A DPoP key for the tests (python3-cryptography): what the queue page does with
WebCrypto, and what docs/examples/dpop_client.py shows API clients.

    k = DPoPKey()
    headers = {"DPoP": k.proof("POST", "https://127.0.0.1:8443/q/E/join")}
"""

import base64
import hashlib
import json
import os
import time

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, utils


def b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


class DPoPKey:
    def __init__(self):
        self.key = ec.generate_private_key(ec.SECP256R1())
        n = self.key.public_key().public_numbers()
        self.jwk = {"kty": "EC", "crv": "P-256", "x": b64url(n.x.to_bytes(32, "big")),
                    "y": b64url(n.y.to_bytes(32, "big"))}

    @property
    def jkt(self):
        """RFC 7638 thumbprint: SHA-256 of the required members, sorted, no spaces."""
        canon = json.dumps({k: self.jwk[k] for k in ("crv", "kty", "x", "y")},
                           separators=(",", ":"), sort_keys=True)
        return b64url(hashlib.sha256(canon.encode()).digest())

    def proof(self, method, url, iat=None, jti=None, header=None):
        """A compact ES256 JWS: {typ, alg, jwk} over {jti, htm, htu, iat}."""
        h = header or {"typ": "dpop+jwt", "alg": "ES256", "jwk": self.jwk}
        claims = {"jti": jti or b64url(os.urandom(16)), "htm": method, "htu": url,
                  "iat": int(time.time()) if iat is None else iat}
        signing_input = (b64url(json.dumps(h).encode()) + "." +
                         b64url(json.dumps(claims).encode()))
        der = self.key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256()))
        r, s = utils.decode_dss_signature(der)
        return signing_input + "." + b64url(r.to_bytes(32, "big") + s.to_bytes(32, "big"))
