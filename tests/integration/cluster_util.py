"""Helpers for the tests that need the cluster topology itself (test_cluster_*.py,
test_rolling_*.py): a module stack that is always `ONSALE_TOPOLOGY=cluster`, the processes
deploy/onsale started (pid files in <state>/run), HAProxy's view of its servers (stats
socket), and a bounded background load."""

import os
import signal
import socket
import subprocess
import threading
import time
import unittest

import stack
from stack import HOST, Client, wait_for


def module_cluster_stack(name):
    S = stack.Stack(name, cluster=True)

    def cleanup():
        stack._CURRENT = None
        S.stop()

    unittest.addModuleCleanup(cleanup)
    stack._CURRENT = S
    S.start()
    return S


def pid_of(S, name):
    with open(os.path.join(S.state, "run", f"{name}.pid")) as f:
        return int(f.read().strip())


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def reaped(pid):
    """True once pid is gone from the process table, not merely dead: a zombie still
    answers kill(pid, 0), and programs that lock a pid file that way (pg_autoctl,
    Postgres) refuse to start beside it. An orphan's zombie waits for init to reap it,
    which some inits do only every second or two."""
    return not os.path.exists(f"/proc/{pid}")


def up(S):
    """`deploy/onsale up` again: starts whatever of the stack is not running and waits
    until it is ready (idempotent)."""
    p = subprocess.run([S.script, "up"], cwd=S.source, env=S.env(), capture_output=True,
                       stdin=subprocess.DEVNULL, timeout=stack.UP_TIMEOUT)
    if p.returncode != 0:
        raise AssertionError(f"deploy/onsale up failed:\n{p.stdout.decode()}{p.stderr.decode()}")


def haproxy(S, command):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(os.path.join(S.state, "run", "haproxy.sock"))
        s.sendall(command.encode() + b"\n")
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out.decode()
            out += chunk


def server_status(S):
    """{(backend, server): status} from HAProxy's `show stat` (UP, DOWN, …)."""
    lines = haproxy(S, "show stat").splitlines()
    head = lines[0].lstrip("# ").split(",")
    out = {}
    for ln in lines[1:]:
        if not ln:
            continue
        row = dict(zip(head, ln.split(",")))
        if row["svname"] not in ("FRONTEND", "BACKEND"):
            out[(row["pxname"], row["svname"])] = row["status"]
    return out


def gateway_client(S, timeout=10):
    return Client(S.haproxy_port, S.ctx, timeout=timeout)


class Load:
    """Threads sending requests until stopped (or max_s passes); every answer and every
    transport error is recorded with its time."""

    def __init__(self, fns, threads_per_fn=2, max_s=120):
        self.fns, self.n, self.max_s = fns, threads_per_fn, max_s
        self.stop_flag = threading.Event()
        self.lock = threading.Lock()
        self.results = []  # (t, name, status or exception text)
        self.threads = []

    def _run(self, name, fn):
        deadline = time.monotonic() + self.max_s
        state = {}
        while not self.stop_flag.is_set() and time.monotonic() < deadline:
            t = time.monotonic()
            try:
                status = fn(state)
            except Exception as e:  # noqa: BLE001 — recorded as a failure
                status = f"{type(e).__name__}: {e}"
            with self.lock:
                self.results.append((t, name, status))
        for c in state.values():
            if hasattr(c, "close"):
                c.close()

    def start(self):
        for name, fn in self.fns.items():
            for _ in range(self.n):
                th = threading.Thread(target=self._run, args=(name, fn), daemon=True)
                th.start()
                self.threads.append(th)
        return self

    def stop(self):
        self.stop_flag.set()
        for th in self.threads:
            th.join(60)
        return self.results
