#!/usr/bin/env python3
"""tickets.py — joins a waiting room N times and prints one queue ticket a line.

    tickets.py --port P --ca CA --event E --count N [--sample FILE]

Keep-alive HTTPS (verified with the stack's CA) over a few connections in threads, so a
few thousand joins take seconds. --sample writes one full join answer (the body nginx
then serves, byte for byte, as the reference). Exit 1 on any non-201 answer.
Standard library only.
"""
import argparse
import http.client
import json
import ssl
import sys
import threading


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ca", required=True)
    ap.add_argument("--event", required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--sample")
    a = ap.parse_args()
    ctx = ssl.create_default_context(cafile=a.ca)
    out, errors, lock = [], [], threading.Lock()

    def worker(n):
        c = http.client.HTTPSConnection("127.0.0.1", a.port, context=ctx, timeout=30)
        try:
            for _ in range(n):
                c.request("POST", f"/q/{a.event}/join", body=b"{}",
                          headers={"Content-Type": "application/json"})
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
