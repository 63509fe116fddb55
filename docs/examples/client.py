#!/usr/bin/env python3
"""A fan's purchase from Python, standard library only: join the waiting room, poll
until admitted, hold seats (all or nothing; another seat if one was just taken), extend
the hold at checkout, pay, and follow a pending payment to its end.

    deploy/onsale up
    eval "$(deploy/onsale env)"
    python3 docs/examples/client.py --event demo --seats 2 [--card tok_visa]

Prints each step and, last, the booking as one JSON line. Exit 0 when booked, 1 when
the purchase ended otherwise (declined card, sold out, …), with the reason.
"""

import argparse
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pow as proof_of_work  # noqa: E402 (docs/examples/pow.py, beside this file)


class Api:
    def __init__(self, base, ca):
        self.base = base.rstrip("/")
        self.ctx = ssl.create_default_context(cafile=ca)

    def __call__(self, method, path, token=None, body=None, headers=None):
        """(status, json) of one call; error answers are returned, not raised."""
        h = {"Accept": "application/json", **(headers or {})}
        data = None
        if token:
            h["Authorization"] = f"Bearer {token}"
        if body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        req = urllib.request.Request(self.base + path, data=data, headers=h, method=method)
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=30) as r:
                raw = r.read()
                return r.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as e:
            raw = e.read()
            return e.code, json.loads(raw) if raw else None


def step(msg, **kw):
    print(msg, json.dumps(kw) if kw else "", flush=True)


def wait_in_line(gw, event, deadline):
    status, j = proof_of_work.join(gw, event)  # solves the room's challenge if it has one
    if status not in (200, 201):
        sys.exit(f"join: {status} {j}")
    ticket = j["ticket"]
    step("joined", state=j["state"], position=j.get("position"))
    while j["state"] != "admitted":
        if time.monotonic() > deadline:
            sys.exit("still in line at the deadline")
        time.sleep(max(1.0, j.get("poll_after_ms", 1000) / 1000))
        status, j = gw("GET", f"/q/{event}/status", token=ticket)
        if status != 200:
            sys.exit(f"status: {status} {j}")
        step("waiting" if j["state"] != "admitted" else "admitted", state=j["state"],
             position=j.get("position"))
    return j["admission_token"]


def hold_seats(rs, event, token, n):
    tried = set()
    for _ in range(10):
        status, seatmap = rs("GET", f"/v1/events/{event}/seats")
        free = [s["id"] for s in seatmap["seats"] if s["status"] == "available"
                and s["id"] not in tried][:n]
        if len(free) < n:
            sys.exit("not enough seats left")
        status, h = rs("POST", f"/v1/events/{event}/holds", token=token, body={"seats": free})
        if status == 201:
            step("held", seats=h["seats"], amount=h["amount"], expires_at=h["expires_at"])
            return h
        if status == 409 and h["error"] == "seat_unavailable":
            step("just taken, choosing again", unavailable=h["unavailable"])
            tried.update(h["unavailable"])
            continue
        sys.exit(f"hold: {status} {h}")
    sys.exit("every try lost the race")


def pay(rs, hold, token, card, deadline):
    status, ext = rs("POST", f"/v1/holds/{hold['hold_id']}/extend", token=token)
    if status != 200:
        sys.exit(f"extend: {status} {ext}")
    step("checkout", held_until=ext["expires_at"])
    key = str(uuid.uuid4())  # one purchase: every retry below reuses it
    body = {"payment": {"amount": hold["amount"], "currency": hold["currency"], "source": card}}
    while True:
        status, j = rs("POST", f"/v1/holds/{hold['hold_id']}/confirm", token=token, body=body,
                       headers={"Idempotency-Key": key})
        if status in (200, 201):
            return j
        if status == 202 or (status == 409 and j.get("error") == "in_progress"):
            step("payment pending", checkout_id=j.get("checkout_id"))
            if time.monotonic() > deadline:
                sys.exit("the payment is still pending; GET /v1/checkouts/<id> later")
            time.sleep(2)
            continue  # the same key resumes the same checkout, never a second charge
        print(json.dumps({"status": status, **(j or {})}))
        sys.exit(1)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--event", default="demo")
    p.add_argument("--seats", type=int, default=1)
    p.add_argument("--card", default="tok_visa")
    p.add_argument("--timeout", type=float, default=300, help="seconds for the whole purchase")
    a = p.parse_args()
    try:
        gw_url, rs_url = os.environ["ONSALE_GATEWAY_URL"], os.environ["ONSALE_RESERVE_URL"]
        ca = os.environ["ONSALE_CA"]
    except KeyError as e:
        sys.exit(f'{e.args[0]} is not set: run eval "$(deploy/onsale env)" first')
    deadline = time.monotonic() + a.timeout
    gw, rs = Api(gw_url, ca), Api(rs_url, ca)
    token = wait_in_line(gw, a.event, deadline)
    hold = hold_seats(rs, a.event, token, a.seats)
    booking = pay(rs, hold, token, a.card, deadline)
    step("booked")
    print(json.dumps(booking))


if __name__ == "__main__":
    main()
