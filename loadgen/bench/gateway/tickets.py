#!/usr/bin/env python3
"""tickets.py — joins a waiting room N times and prints one queue ticket a line.

    tickets.py --port P --ca CA --event E --count N [--sample FILE]
               [--dpop true|false] [--proof-out FILE]

Keep-alive HTTPS (verified with the stack's CA) over a few connections in threads, so a
few thousand joins take seconds. --sample writes one full join answer (the body nginx
then serves, byte for byte, as the reference). Exit 1 on any non-201 answer.
With --dpop true every join sends one DPoP proof (made once here with python3-cryptography:
a join only reads the key from it, docs/api.md), so the tickets are bound to that key;
--proof-out writes the proof (or nothing) for the join runs. Otherwise standard library only.
"""
import argparse
import base64
import http.client
import json
import ssl
import sys
import threading
import time
import uuid


def b64(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def make_proof(port, event):
    """One ES256 DPoP proof for POST /q/<event>/join (docs/api.md)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, utils
    key = ec.generate_private_key(ec.SECP256R1())
    n = key.public_key().public_numbers()
    jwk = {"kty": "EC", "crv": "P-256", "x": b64(n.x.to_bytes(32, "big")),
           "y": b64(n.y.to_bytes(32, "big"))}
    head = b64(json.dumps({"typ": "dpop+jwt", "alg": "ES256", "jwk": jwk}).encode())
    body = b64(json.dumps({"jti": uuid.uuid4().hex, "htm": "POST", "iat": int(time.time()),
                           "htu": f"https://127.0.0.1:{port}/q/{event}/join"}).encode())
    r, s = utils.decode_dss_signature(key.sign(f"{head}.{body}".encode(),
                                               ec.ECDSA(hashes.SHA256())))
    return f"{head}.{body}.{b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ca", required=True)
    ap.add_argument("--event", required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--sample")
    ap.add_argument("--dpop", default="false")
    ap.add_argument("--proof-out")
    a = ap.parse_args()
    headers = {"Content-Type": "application/json"}
    proof = make_proof(a.port, a.event) if a.dpop == "true" else ""
    if proof:
        headers["DPoP"] = proof
    if a.proof_out:
        with open(a.proof_out, "w") as f:
            f.write(proof + "\n" if proof else "")
    ctx = ssl.create_default_context(cafile=a.ca)
    out, errors, lock = [], [], threading.Lock()

    def worker(n):
        c = http.client.HTTPSConnection("127.0.0.1", a.port, context=ctx, timeout=30)
        try:
            for _ in range(n):
                c.request("POST", f"/q/{a.event}/join", body=b"{}", headers=headers)
                r = c.getresponse()
                body = r.read()
                if r.status != 201:
                    with lock:
                        errors.append(f"{r.status} {body[:200]!r}")
                    return
                with lock:
                    out.append((json.loads(body)["ticket"], body))
        except Exception as e:  # noqa: BLE001 — reported below
            with lock:
                errors.append(f"{type(e).__name__}: {e}")
        finally:
            c.close()

    per = [a.count // a.threads + (1 if i < a.count % a.threads else 0) for i in range(a.threads)]
    ts = [threading.Thread(target=worker, args=(n,)) for n in per if n]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors or len(out) != a.count:
        sys.stderr.write(f"tickets.py: {len(out)} of {a.count} joins succeeded; "
                         f"first error: {errors[0] if errors else '?'}\n")
        return 1
    if a.sample:
        with open(a.sample, "wb") as f:
            f.write(out[-1][1])
    sys.stdout.write("".join(t + "\n" for t, _ in out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
