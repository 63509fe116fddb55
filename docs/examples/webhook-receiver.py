#!/usr/bin/env python3
"""A receiver of onsale's events out (docs/api.md, "Events out"), standard library only.

    webhook-receiver.py --listen 127.0.0.1:8090 --secret-file events-secret [--tolerance 300]

Each POST carries `Onsale-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>…]`, where each
v1 is HMAC-SHA256(secret, "<t>.<raw body>") in lowercase hex, and `Onsale-Event-Id`. The
receiver checks the signature against every secret of the file (one a line: during a
rotation it holds the old and the new), refuses a timestamp further than --tolerance
seconds from its clock (a replay), answers 2xx only once the event is taken, and prints
each event once as one JSON line. Delivery is at least once: an event may come again
(same id) after a timeout or a crash, so it is deduplicated by id; events of one booking
come in order, each only after the one before it was answered 2xx.

Import it to reuse verify() or Receiver (tests/integration/test_reserve_events.py does).
"""

import argparse
import hashlib
import hmac
import http.server
import json
import sys
import threading
import time

BODY_MAX = 1024 * 1024
HEADER_MAX = 2048
KEY_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789"


class SignatureError(ValueError):
    """Why a signature was refused: malformed, no_timestamp, no_signature, mismatch,
    stale (the names cm_hmacsig uses)."""


def parse_signature(header):
    """(t, [v1 bytes…]) from an Onsale-Signature value; SignatureError when it is not
    comma-separated key=value elements with one t= and at least one v1=."""
    if not header or len(header) > HEADER_MAX:
        raise SignatureError("malformed")
    t, sigs = None, []
    for element in header.split(","):
        key, eq, value = element.partition("=")
        if not eq or not key or not value or any(c not in KEY_CHARS for c in key) or \
                any(c <= " " or c > "~" for c in value):
            raise SignatureError("malformed")
        if key == "t":
            if t is not None or not value.isdigit() or not value.isascii() or len(value) > 18:
                raise SignatureError("no_timestamp")
            t = int(value)
        elif key == "v1":
            if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
                raise SignatureError("no_signature")
            sigs.append(bytes.fromhex(value))
    if t is None:
        raise SignatureError("no_timestamp")
    if not sigs:
        raise SignatureError("no_signature")
    return t, sigs


def sign(secret, t, body):
    """The header value onsale would send for body at time t (for tests)."""
    mac = hmac.new(secret, str(t).encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"


def verify(header, body, secrets, tolerance=300, now=None):
    """Checks header over the raw body bytes against the secrets (bytes); returns the
    timestamp, or raises SignatureError."""
    t, sigs = parse_signature(header)
    signed = str(t).encode() + b"." + body
    ok = False
    for secret in secrets:
        want = hmac.new(secret, signed, hashlib.sha256).digest()
        for sig in sigs:
            ok |= hmac.compare_digest(want, sig)  # constant time, every pair compared
    if not ok:
        raise SignatureError("mismatch")
    now = time.time() if now is None else now
    if abs(now - t) > tolerance:
        raise SignatureError("stale")
    return t


def read_secrets(path):
    with open(path, "rb") as f:
        secrets = [line.strip() for line in f.read().splitlines() if line.strip()]
    if not secrets:
        raise SystemExit(f"{path}: no secret in it")
    return secrets


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        srv = self.server
        try:
            n = int(self.headers.get("Content-Length", ""))
        except ValueError:
            return self._answer(411, "length_required")
        if n < 0 or n > BODY_MAX:
            return self._answer(413, "too_large")
        body = self.raw_body = self.rfile.read(n)
        try:
            verify(self.headers.get("Onsale-Signature", ""), body, srv.secrets, srv.tolerance)
        except SignatureError as e:
            return self._answer(400, f"signature_{e}")
        try:
            event = json.loads(body)
        except ValueError:
            return self._answer(400, "not_json")
        if not isinstance(event, dict) or not isinstance(event.get("id"), str) or \
                event["id"] != self.headers.get("Onsale-Event-Id"):
            return self._answer(400, "bad_envelope")
        status = srv.take(event, self)
        self._answer(status, "ok" if 200 <= status < 300 else "not_taken")

    def _answer(self, status, word):
        data = json.dumps({"result": word}).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            self.close_connection = True  # the sender gave up (its deadline): it retries

    def log_message(self, fmt, *args):
        pass  # the events themselves are the output


class Receiver(http.server.ThreadingHTTPServer):
    """Verifies and takes events; on_event(event) is called once per new id (override
    take(event, request) to decide the answer yourself: request is the handler, with
    .headers and .raw_body)."""

    daemon_threads = True

    def __init__(self, address, secrets, tolerance=300, on_event=None):
        super().__init__(address, Handler)
        self.secrets = secrets
        self.tolerance = tolerance
        self.on_event = on_event or (lambda ev: print(json.dumps(ev), flush=True))
        self.seen = set()
        self.lock = threading.Lock()

    def take(self, event, request=None):
        with self.lock:
            if event["id"] in self.seen:
                return 200  # a repeat of one already taken: acknowledged, not taken twice
            self.seen.add(event["id"])
        self.on_event(event)
        return 200


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", default="127.0.0.1:8090", help="host:port")
    ap.add_argument("--secret-file", required=True, help="one secret a line")
    ap.add_argument("--tolerance", type=int, default=300, help="seconds")
    args = ap.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    srv = Receiver((host, int(port)), read_secrets(args.secret_file), args.tolerance)
    sys.stderr.write(f"listening on {args.listen}\n")
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
