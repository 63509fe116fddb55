"""The Postgres primary lost mid-sale (cluster topology: a primary and a synchronous
standby under pg_auto_failover, deploy/lib/pg_cluster.sh). Buyers keep holding and
confirming through HAProxy while the primary's machine dies: its keeper and its Postgres
are SIGKILLed together (killing Postgres alone, the keeper would restart it in place).
The monitor promotes the standby; the reserves' pools find the new primary through their
multi-host conninfo (target_session_attrs=read-write); sales resume. Then the audit:
every kept charge has exactly one booking, every buyer told "confirmed" has that booking
on the new primary, no unit sold twice, every checkout terminal — and no buyer got a 500
or a "confirmed" whose booking went missing. The old primary then comes back (its keeper
restarted, as a reboot would) and rejoins as the standby by itself; a second failover,
back to it, works as well.
"""

import os
import signal
import threading
import time
import unittest
import uuid

import cluster_util as cu
import stack
from stack import Client, wait_for
from test_saga_flows import TERMINAL, SagaCase

S = None
FAULT_AT = [0.0]  # when the last fault's signal went out (time.monotonic())


def signalled():
    """Notes that the fault happened now: timing starts at the signal itself, not when
    the main thread decided to send it (with buyer threads about, the GIL can put tens
    of milliseconds in between, enough for a confirmation to finish before the kill)."""
    FAULT_AT[0] = time.monotonic()


def setUpModule():
    global S
    S = cu.module_cluster_stack("pgfailover")


def primary_node():
    """pg-1 or pg-2: the node that takes writes now (waits, bounded, for one)."""
    def port():
        try:
            return int(S.sql_value("select inet_server_port()"))
        except AssertionError:
            return None
    return "pg-1" if wait_for(port, 30, interval=0.2, what="a primary") == S.pg_port else "pg-2"


def node_role(name):
    """'primary', 'standby' or None (down), asked of that node alone."""
    p = stack.subprocess.run(["psql", "-h", stack.HOST, "-p", str(port_of(name)), "-U",
                              "onsale", "-X", "onsale", "-Atc", "select pg_is_in_recovery()"],
                             capture_output=True, timeout=10,
                             env=dict(os.environ, PGCONNECT_TIMEOUT="2",
                                      PGPASSWORD=S.pg_password))
    if p.returncode != 0:
        return None
    return "standby" if p.stdout.strip() == b"t" else "primary"


def port_of(name):
    return S.pg_port if name == "pg-1" else S.pg_port + 10


def takes_writes(name, timeout=2):
    """That node alone answers as a read-write primary."""
    p = stack.subprocess.run(["psql", "-h", stack.HOST, "-p", str(port_of(name)), "-U",
                              "onsale", "-X", "onsale", "-Atc",
                              "select not pg_is_in_recovery() and "
                              "current_setting('transaction_read_only') = 'off'"],
                             capture_output=True, timeout=timeout + 10,
                             env=dict(os.environ, PGCONNECT_TIMEOUT=str(timeout),
                                      PGPASSWORD=S.pg_password))
    return p.returncode == 0 and p.stdout.strip() == b"t"


def postgres_pids(name):
    """A node's postmaster and every process it forked (not its keeper)."""
    try:
        top = postmaster_pid(name)
    except (OSError, ValueError):
        return [None]
    pids = [top]
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == top:
            pids.append(int(d))
    return pids


def sync_standbys():
    return int(S.sql_value("select count(*) from pg_stat_replication "
                           "where sync_state in ('sync', 'quorum')"))


def signal_machine(name, sig):
    """Sends sig to everything of a node at once, as if its machine died (SIGKILL) or
    froze (SIGSTOP): the keeper's process group (the keeper runs in a session of its own;
    its Postgres postmaster is in it) and the postmaster's children, which Postgres puts
    in sessions of their own (backends, WAL sender…)."""
    group = cu.pid_of(S, name)
    children = postgres_pids(name)[1:]
    os.killpg(group, sig)
    for pid in children:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    signalled()
    return group


def kill_machine(name):
    """SIGKILL to all of a node; returns once its keeper is reaped, as on a machine that
    died: a later `up` must find no zombie holding the keeper's pid file."""
    pid = signal_machine(name, signal.SIGKILL)
    wait_for(lambda: cu.reaped(pid), 10, interval=0.05, what=f"{name} gone")


class Sale:
    """Buyers holding one unit and confirming it, through HAProxy, until stopped. Every
    answer is kept with its time: (t, what, status)."""

    def __init__(self, ev, buyers=4):
        self.ev, self.n = ev, buyers
        self.sold = []  # (checkout_id, booking_id, quantity, t asked, t answered): 201s
        self.tried = []  # [hold_id, token, amount, Idempotency-Key, status]
        self.answers = []  # (t, "hold" | "confirm", status or exception name, Retry-After)
        self.lock = threading.Lock()
        self.stop_flag = threading.Event()
        self.threads = []

    def _note(self, t, what, r):
        with self.lock:
            self.answers.append((t, what, r.status, r.header("Retry-After")))

    def _buyer(self, n):
        c = Client(S.reserve_port, S.ctx, timeout=15)
        k = 0
        deadline = time.monotonic() + 240
        try:
            while not self.stop_flag.is_set() and time.monotonic() < deadline:
                k += 1
                tok = S.token(self.ev, f"pgbuyer-{n}-{k}")
                t = time.monotonic()
                try:
                    h = c.post(f"/v1/events/{self.ev}/holds", {"pool": "floor", "quantity": 1},
                               token=tok)
                    self._note(t, "hold", h)
                    if h.status != 201:
                        if h.status == 409:
                            break  # sold out
                        time.sleep(0.05)
                        continue
                    key = uuid.uuid4().hex
                    attempt = [h.json["hold_id"], tok, h.json["amount"], key, "sent"]
                    with self.lock:
                        self.tried.append(attempt)
                    t = time.monotonic()
                    cf = c.post(f"/v1/holds/{h.json['hold_id']}/confirm",
                                {"payment": {"amount": h.json["amount"], "currency": "EUR",
                                             "source": "tok_visa"}},
                                token=tok, headers={"Idempotency-Key": key})
                    self._note(t, "confirm", cf)
                    attempt[4] = cf.status
                    if cf.status == 201:
                        with self.lock:
                            # when the confirmation was asked for: one sent before a
                            # fault and answered after it does not count as after
                            self.sold.append((cf.json["checkout_id"], cf.json["booking_id"],
                                              cf.json["quantity"], t, time.monotonic()))
                except Exception as e:  # noqa: BLE001 — recorded; a failover may cut a call
                    with self.lock:
                        self.answers.append((t, "error", type(e).__name__, None))
        finally:
            c.close()

    def start(self):
        for n in range(self.n):
            th = threading.Thread(target=self._buyer, args=(n,), daemon=True)
            th.start()
            self.threads.append(th)
        return self

    def stop(self):
        self.stop_flag.set()
        for th in self.threads:
            th.join(60)

    def sold_after(self, t):
        with self.lock:
            return [s for s in self.sold if s[3] > t]


def standby_node():
    return "pg-1" if primary_node() == "pg-2" else "pg-2"


def postmaster_pid(name):
    """The pid of a node's Postgres itself (its keeper's child), from postmaster.pid."""
    with open(os.path.join(S.state, "pgha", name, "postmaster.pid")) as f:
        return int(f.readline())


def wake(pids):
    for pid in pids:
        if pid is None:
            continue
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass  # a backend that was on its way out


class PrimaryFailover(SagaCase):
    def _fault_mid_sale(self, label, fault, limit_s=15.0):
        """Runs fault() mid-sale (it returns what it hit); returns (that, the primary
        after). Checks: a confirmation within limit_s of the fault, never a 500, every 503
        with Retry-After, and the money audit."""
        cap = 300
        ev = self.new_event(pools=[{"id": "floor", "capacity": cap, "price": 2500}],
                            max_per_buyer=4)
        self.assertGreaterEqual(sync_standbys(), 1, "no synchronous standby before the fault")
        sale = Sale(ev).start()
        try:
            wait_for(lambda: len(sale.sold) >= 5, 30, interval=0.1, what="sales before the fault")
            before = len(sale.sold)
            hit = fault()
            t_fault = FAULT_AT[0]
            wait_for(lambda: sale.sold_after(t_fault), 40, interval=0.1,
                     what="a confirmed sale after the fault")
            first_s = min(s[4] for s in sale.sold_after(t_fault)) - t_fault
            time.sleep(1.0)
        finally:
            sale.stop()
        new = primary_node()
        between = {}
        for t, what, status, retry_after in sale.answers:
            if t >= t_fault - 1:
                between[(what, status)] = between.get((what, status), 0) + 1
        stack.note(f"postgres {label}: {hit} hit, {new} primary; first confirmation "
                   f"{first_s:.1f}s after; {before} sales before, {len(sale.sold)} in all; "
                   f"answers from the fault on: {between}")
        for t, what, status, retry_after in sale.answers:
            self.assertFalse(isinstance(status, int) and status >= 500 and status != 503,
                             f"{what} answered {status}")
            if status == 503:
                self.assertIsNotNone(retry_after, f"{what} 503 without Retry-After")
        self.assertLess(first_s, limit_s, f"first confirmation after the fault: {first_s:.1f}s")
        self.audit_the_money(ev, cap, sale)
        return hit, new

    def _kill_primary(self):
        old = primary_node()
        kill_machine(old)
        return old

    def test_1_primary_killed_mid_sale(self):
        old, new = self._fault_mid_sale("failover", self._kill_primary)
        self.assertNotEqual(new, old, "the standby was not promoted")

    def test_2_old_primary_rejoins_and_fails_back(self):
        # test_1 left one node dead: its keeper comes back (as a reboot would) and, with no
        # step of ours, rejoins as the standby of the new primary (pg_rewind if needed).
        dead = standby_node()
        cu.up(S)
        wait_for(lambda: node_role(dead) == "standby" and sync_standbys() >= 1, 90,
                 interval=0.5, what=f"{dead} back as a synchronous standby")
        old, new = self._fault_mid_sale("failover back", self._kill_primary)
        self.assertEqual(new, dead, "the failover went back to the rejoined node")
        cu.up(S)
        wait_for(lambda: sync_standbys() >= 1, 90, interval=0.5, what="a synchronous standby")

    def test_3_standby_lost_mid_sale(self):
        # Commits wait for the standby until the monitor sees it gone and lets the primary
        # commit alone (wait_primary): the buyers in between get 503 or 202, none a 500.
        primary = primary_node()

        def kill_standby():
            victim = standby_node()
            kill_machine(victim)
            return victim
        hit, new = self._fault_mid_sale("standby lost", kill_standby, limit_s=20.0)
        self.assertEqual(new, primary, "losing the standby moved the primary")
        cu.up(S)
        wait_for(lambda: sync_standbys() >= 1, 90, interval=0.5, what="the standby back in sync")

    def test_4_monitor_down_primary_keeps_serving(self):
        primary = primary_node()

        def kill_monitor():
            kill_machine("pg-monitor")
            return "pg-monitor"
        # no failover and no wait: the first confirmation comes as fast as ever
        hit, new = self._fault_mid_sale("monitor down", kill_monitor, limit_s=3.0)
        self.assertEqual(new, primary)
        self.assertGreaterEqual(sync_standbys(), 1, "the primary lost its synchronous standby")
        cu.up(S)

    def test_5_postgres_restarted_under_load(self):
        # The primary's Postgres alone dies (its keeper lives and restarts it in place,
        # or the monitor fails over if that takes too long): either way sales resume.
        def kill_postgres():
            name = primary_node()
            os.kill(postmaster_pid(name), signal.SIGKILL)
            signalled()
            return name
        self._fault_mid_sale("restarted", kill_postgres)
        cu.up(S)
        wait_for(lambda: sync_standbys() >= 1, 90, interval=0.5, what="a synchronous standby")

    def test_6_split_old_primary_accepts_no_booking(self):
        # The primary's machine freezes (SIGSTOP: keeper and Postgres), the standby is
        # promoted; then the old primary's Postgres alone wakes up while its keeper still
        # sleeps — it accepts connections and believes it is the primary. Nothing can be
        # committed there any more (its synchronous standby is gone), the sale goes on on
        # the new primary, and once its keeper wakes the old primary is demoted and
        # rewound: what it took is not in the system of record.
        S.sql("create table if not exists split_probe (note text)")
        wait_for(lambda: sync_standbys() >= 1, 60, interval=0.5, what="a synchronous standby")
        old, new = primary_node(), standby_node()
        ev = self.new_event(pools=[{"id": "floor", "capacity": 300, "price": 2500}],
                            max_per_buyer=4)
        sale = Sale(ev).start()
        try:
            wait_for(lambda: len(sale.sold) >= 5, 30, interval=0.1, what="sales before the split")
            frozen = postgres_pids(old)
            group = signal_machine(old, signal.SIGSTOP)
            t_frozen = FAULT_AT[0]
            try:
                wait_for(lambda: takes_writes(new), 60, interval=0.2,
                         what=f"{new} promoted while {old} is frozen")
                t_promoted = time.monotonic()
                wait_for(lambda: sale.sold_after(t_promoted), 40, interval=0.1,
                         what="a confirmed sale on the new primary")
                first_s = min(x[4] for x in sale.sold_after(t_frozen)) - t_frozen
                wake(frozen)
                self.assertTrue(takes_writes(old, timeout=5), f"{old} not split: test invalid")
                # a write straight to the old primary is never acknowledged
                p = stack.subprocess.Popen(
                    ["psql", "-h", stack.HOST, "-p", str(port_of(old)), "-U", "onsale", "-X",
                     "onsale", "-Atc", "insert into split_probe values ('on the old primary')"],
                    stdout=stack.subprocess.PIPE, stderr=stack.subprocess.STDOUT,
                    env=dict(os.environ, PGPASSWORD=S.pg_password))
                try:
                    out, _ = p.communicate(timeout=4)
                    self.fail(f"the old primary answered a write: {out!r}")
                except stack.subprocess.TimeoutExpired:
                    p.kill()
                    p.communicate()
            finally:
                os.killpg(group, signal.SIGCONT)
                wake(frozen)
            wait_for(lambda: node_role(old) == "standby" and sync_standbys() >= 1, 90,
                     interval=0.5, what=f"{old} demoted and back as a synchronous standby")
            time.sleep(1.0)
        finally:
            sale.stop()
        self.assertEqual(primary_node(), new)
        self.assertEqual(S.sql_value("select count(*) from split_probe"), "0",
                         "a write taken by the old primary reached the system of record")
        for t, what, status, retry_after in sale.answers:
            self.assertFalse(isinstance(status, int) and status >= 500 and status != 503,
                             f"{what} answered {status}")
        stack.note(f"postgres split: {old} frozen, {new} primary, first confirmation "
                   f"{first_s:.1f}s after the freeze; then {old}'s Postgres woken alone took "
                   f"no write; {len(sale.sold)} sales")
        self.audit_the_money(ev, 300, sale)

    def audit_the_money(self, ev, cap, sale):
        """Every checkout of ev settled and audited against the provider's ledger, on the
        primary that is left."""
        def settled():
            rows = S.sql(f"select state from checkouts where event_id = '{ev}'")
            return rows and all(r[0] in TERMINAL for r in rows)
        wait_for(settled, 120, interval=0.5, what="every checkout of the event settled")
        audit = self.audit_event(ev)  # kept charge <-> one booking; else refunded
        booked = dict(S.sql(f"select checkout_id, booking_id from bookings "
                            f"where event_id = '{ev}'"))
        for cid, bid, _, _, _ in sale.sold:
            self.assertEqual(audit.get(cid), "charged+booked", cid)
            self.assertEqual(booked.get(cid), bid, f"{cid}: confirmed, booking missing")
        by_key = {k: (cid, hid) for cid, k, hid in S.sql(
            f"select checkout_id, idem_key, hold_id from checkouts where event_id = '{ev}'")}
        seen = {}
        for hold_id, tok, amount, key, status in [a for a in sale.tried if a[4] != 201]:
            if key not in by_key:
                seen["never recorded"] = seen.get("never recorded", 0) + 1
                continue
            cid, hid = by_key[key]
            self.assertEqual(hid, hold_id)
            seen[audit[cid]] = seen.get(audit[cid], 0) + 1
            # a replay of the key answers what the ledger says
            r = self.c.post(f"/v1/holds/{hold_id}/confirm",
                            {"payment": {"amount": amount, "currency": "EUR",
                                         "source": "tok_visa"}},
                            token=tok, headers={"Idempotency-Key": key})
            if audit[cid] == "charged+booked":
                self.assertEqual((r.status, r.json.get("booking_id")), (200, booked[cid]),
                                 f"{cid} (cut: {status}): {r!r}")
            else:
                self.assertNotIn(r.status, (200, 201), f"{cid} (cut: {status}): {r!r}")
        self.assertEqual(set(booked), {c for c, o in audit.items() if o == "charged+booked"})
        units = [r[0] for r in S.sql(f"select seat_id from booking_items "
                                     f"where event_id = '{ev}'")]
        self.assertEqual(len(units), len(set(units)), "a unit sold twice")
        self.assertLessEqual(len(units), cap)
        stack.note(f"postgres failover audit: {len(sale.tried)} confirmations, "
                   f"{len(sale.sold)} answered 201, cut or refused: {seen}; "
                   f"{len(booked)} bookings")


if __name__ == "__main__":
    unittest.main()
