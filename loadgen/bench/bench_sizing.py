#!/usr/bin/env python3
"""loadgen/bench/bench_sizing.py — the per-operation costs docs/sizing.md is derived from.

On a private stack (tests/integration/stack.py: `deploy/onsale up` in a temporary state
dir, free ports) of the chosen topology, it runs four bounded phases through the public
front (the gateway / reserve in single, HAProxy in cluster), each with T threads on
keep-alive TLS connections:

  join     POST /q/E/join            (per-address join limit off for the run; room paused)
  poll     GET  /q/E/status          (a fan still waiting: the dominant fan traffic)
  admit    GET  /q/E/status          (the same fans once let in: each claims its admission)
  hold     POST /v1/events/E/holds   (GA pool, quantity 1, one buyer each)
  confirm  POST /v1/holds/H/confirm  (each hold of the previous phase, paysim 0 ms)

and reports for each phase: throughput, Redis commands per operation (INFO commandstats,
summed over every master), Postgres commits per operation (pg_stat_database), and CPU
milliseconds per operation of gateways, reserves, Redis and Postgres (utime+stime from
/proc, all processes of a kind). CPU per operation is the sizing figure: it does not
depend on how busy the shared machine was; throughput does.

Usage: bench_sizing.py [--topology single|cluster] [--n N] [--threads T] [--redis-tls]
--redis-tls: the stack's Redis speaks TLS only (ONSALE_REDIS_TLS=1), the services too.
Environment: ONSALE_BUILD_DIR (default <checkout>/build). Exit 0 when measured.
"""

import argparse
import os
import sys
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
os.environ.setdefault("ONSALE_BUILD_DIR", os.path.join(ROOT, "build"))
os.environ.setdefault("ONSALE_SOURCE_DIR", ROOT)
os.environ["ONSALE_GATEWAY_JOIN_RATE_PER_IP"] = "0"  # one address sends every join
os.environ["ONSALE_PAYSIM_LATENCY_MIN_MS"] = "0"  # the provider is not what is measured
os.environ["ONSALE_PAYSIM_LATENCY_MAX_MS"] = "0"

import stack  # noqa: E402
from stack import Client  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_ms(match):
    """utime+stime (ms) of every process whose command line contains all of match."""
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            if not all(m in cmd for m in match):
                continue
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) * 1000 // TICK
        except OSError:
            continue
    return total


def proc_ms(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 // TICK, int(fields[1])


def postgres_ms(S):
    """The stack's postmasters and their children (backends, WAL writer, checkpointer…):
    the single topology's one, or the cluster topology's primary and standby (their
    replication included; the pg_auto_failover monitor is left out)."""
    pms = set()
    for d in ("pg", "pgha/pg-1", "pgha/pg-2"):
        try:
            with open(os.path.join(S.state, d, "postmaster.pid")) as f:
                pms.add(int(f.readline()))
        except OSError:
            continue
    total = 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                ms, ppid = proc_ms(pid)
            except OSError:
                continue
            if int(pid) in pms or ppid in pms:
                total += ms
    return total


def redis_calls(S):
    R = S.new_redis()
    ports = R.masters() if S.cluster else [S.redis_port]
    total = scripts = 0
    for p in ports:
        for line in stack.Redis(p, auth=S.redis_auth, ssl_ctx=S.redis_ssl)("INFO", "commandstats").decode().splitlines():
            if line.startswith("cmdstat_"):
                calls = int(line.split("calls=")[1].split(",")[0])
                total += calls
                if line.startswith(("cmdstat_evalsha:", "cmdstat_eval:")):
                    scripts += calls
    return total - 1 * len(ports), scripts  # less the INFO just sent


def pg_commits(S):
    return int(S.sql_value("select xact_commit from pg_stat_database where datname = 'onsale'"))


def snapshot(S):
    st = S.state
    return {
        "redis": redis_calls(S)[0],
        "scripts": redis_calls(S)[1],
        "pg": pg_commits(S),
        "cpu_gateway": cpu_ms(["onsale-gateway", st]),
        "cpu_reserve": cpu_ms(["onsale-reserve", st]),
        "cpu_redis": sum(cpu_ms(["redis-server", f":{p}"]) for p in S.redis_ports),
        "cpu_postgres": postgres_ms(S),
        "t": time.monotonic(),
    }


def run_phase(name, items, fn, threads):
    lock = threading.Lock()
    out, errors = [], []
    it = iter(items)

    def worker():
        st = {}
        while True:
            with lock:
                try:
                    x = next(it)
                except StopIteration:
                    break
            try:
                r = fn(st, x)
                with lock:
                    out.append(r)
            except Exception as e:  # noqa: BLE001 — reported
                with lock:
                    errors.append(repr(e))
        for c in st.values():
            if hasattr(c, "close"):
                c.close()
    ths = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    return out, errors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--topology", default="single", choices=["single", "cluster"])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--redis-tls", action="store_true")
    a = ap.parse_args()
    S = stack.Stack("sizing", cluster=a.topology == "cluster", redis_tls=a.redis_tls)
    try:
        S.start()
        gw_port = S.haproxy_port if S.cluster else S.gateway_port
        ev = "size-" + uuid.uuid4().hex[:8]
        S.create_event(ev, pools=[{"id": "floor", "capacity": 20000, "price": 100}],
                       max_per_buyer=10)
        r = S.gateway_admin("PUT", f"/admin/events/{ev}",
                            {"rate_per_minute": 600000, "paused": True, "pow": False})
        assert r.status in (200, 201), r
        # warm: the first requests of each kind pay for connections, caches, scripts
        tok = S.token(ev, "warm")
        w = Client(S.reserve_port, S.ctx)
        w.post(f"/v1/events/{ev}/holds", {"pool": "floor", "quantity": 1}, token=tok)
        w.close()
        tickets, holds = [], []
        tokens = [S.token(ev, f"b{i}") for i in range(a.n)]

        def join(st, i):
            cl = st.setdefault("c", Client(gw_port, S.ctx))
            r = cl.post(f"/q/{ev}/join")
            assert r.status == 201, r
            tickets.append(r.json["ticket"])

        def poll(st, t):
            cl = st.setdefault("c", Client(gw_port, S.ctx))
            r = cl.get(f"/q/{ev}/status", token=t)
            assert r.status == 200, r

        def hold(st, tok):
            cl = st.setdefault("c", Client(S.reserve_port, S.ctx))
            r = cl.post(f"/v1/events/{ev}/holds", {"pool": "floor", "quantity": 1}, token=tok)
            assert r.status == 201, r
            holds.append((r.json["hold_id"], r.json["amount"], tok))

        def confirm(st, h):
            cl = st.setdefault("c", Client(S.reserve_port, S.ctx))
            r = cl.post(f"/v1/holds/{h[0]}/confirm",
                        {"payment": {"amount": h[1], "currency": "EUR", "source": "tok_visa"}},
                        token=h[2], headers={"Idempotency-Key": uuid.uuid4().hex})
            assert r.status == 201, r

        # the background (watermark timers, reconciler, availability refresh, cluster
        # map refresh, Postgres' own work): measured idle, subtracted from each phase
        time.sleep(1.0)
        b0 = snapshot(S)
        time.sleep(5.0)
        b1 = snapshot(S)
        bg = {k: (b1[k] - b0[k]) / (b1["t"] - b0["t"]) for k in b0 if k != "t"}
        rows = []
        def unpause():
            r = S.gateway_admin("PATCH", f"/admin/events/{ev}", {"paused": False})
            assert r.status == 200, r
            time.sleep(2.0)  # the watermark passes every number

        for name, fn, items in (("join", join, range(a.n)), ("poll", poll, None),
                                ("admit", poll, None), ("hold", hold, tokens),
                                ("confirm", confirm, None)):
            if name == "admit":
                unpause()
            if items is None:
                items = list(tickets) if name in ("poll", "admit") else list(holds)
            time.sleep(1.0)  # let timers and the reconciler settle between phases
            s0 = snapshot(S)
            _, errs = run_phase(name, items, fn, a.threads)
            s1 = snapshot(S)
            n = len(items)
            dt = s1["t"] - s0["t"]
            per = {k: max(0.0, (s1[k] - s0[k] - bg[k] * dt) / n) for k in bg}
            rows.append((name, n, len(errs), n / dt, per["redis"], per["pg"],
                         per["cpu_gateway"], per["cpu_reserve"], per["cpu_redis"],
                         per["cpu_postgres"], per["scripts"]))
            if errs:
                print(f"{name}: {len(errs)} errors, first {errs[0]}", file=sys.stderr)
        print(f"\ntopology {a.topology}{' (Redis over TLS)' if a.redis_tls else ''}: "
              f"n={a.n} per phase, {a.threads} threads, "
              f"{os.cpu_count()} cores")
        print("background (idle, per second): " +
              ", ".join(f"{k} {v:.1f}" for k, v in bg.items()))
        print("per operation, background subtracted:")
        print("(redis/op: commands Redis executed, those inside scripts included; "
              "scripts/op: EVALSHA/EVAL round trips)")
        print(f"{'phase':8} {'ok/s':>8} {'redis/op':>9} {'scripts/op':>10} {'pg/op':>6} "
              f"{'gw ms/op':>9} {'rsv ms/op':>9} {'redis ms/op':>11} {'pg ms/op':>9} errors")
        for r in rows:
            print(f"{r[0]:8} {r[3]:8.0f} {r[4]:9.2f} {r[10]:10.2f} {r[5]:6.2f} {r[6]:9.3f} {r[7]:9.3f} "
                  f"{r[8]:11.3f} {r[9]:9.3f} {r[2]}")
    finally:
        S.stop()


if __name__ == "__main__":
    main()
