"""The gateway on a real Redis Cluster (three masters): every key of one event in one
hash slot, so each script runs atomically on its shard (a script touching keys of two
slots would be refused with CROSSSLOT); rooms on different shards; the one cross-event
key, the room list, on its own shard, read and written by plain commands and healed by
the gateways when it is lost."""

import os
import shutil
import subprocess
import tempfile
import time
import unittest

import gwstack
import stack
from gwstack import ticket_number
from stack import HOST

NODES = 3
_CLUSTER = {}


def start_cluster(auth, users=()):
    """Three masters on free ports, authenticated like the stack's Redis (its ACL user and
    password, the default user off, and the users given as deploy/onsale's rules: the
    gateway's own); their shutdown is a module cleanup."""
    _CLUSTER["auth"] = auth
    user, password = auth
    root = tempfile.mkdtemp(prefix="onsale-gwcluster-")
    procs, ports = [], []

    def stop():
        for c in _CLUSTER.pop("conns", {}).values():
            c.close()
        for pr in procs:
            pr.terminate()
        for pr in procs:
            pr.wait(10)
        shutil.rmtree(root, ignore_errors=True)
    unittest.addModuleCleanup(stop)
    for i in range(NODES):
        port, bus = stack._free_ports(2)
        d = os.path.join(root, f"n{i}")
        os.mkdir(d)
        procs.append(subprocess.Popen(
            ["redis-server", "--bind", HOST, "--port", str(port), "--save", "",
             "--appendonly", "no", "--dir", d, "--cluster-enabled", "yes",
             "--cluster-port", str(bus), "--cluster-config-file", "nodes.conf",
             "--cluster-node-timeout", "1000", "--user", "default", "off",
             "--user", user, "on", f">{password}", "~*", "&*", "+@all",
             *[w for u in users for w in ("--user", *u)]],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        ports.append(port)
    _CLUSTER["ports"] = ports
    for p in ports:
        stack.wait_for(lambda p=p: redis_at(p)("PING") == "PONG", 10, what=f"redis {p}")
    subprocess.run(["redis-cli", "--user", user, "--pass", password, "--no-auth-warning",
                    "--cluster", "create", *[f"{HOST}:{p}" for p in ports],
                    "--cluster-replicas", "0", "--cluster-yes"], check=True, timeout=60,
                   stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    stack.wait_for(lambda: all(b"cluster_state:ok" in redis_at(p)("CLUSTER", "INFO")
                               for p in ports), 20, what="cluster_state:ok")


def setUpModule():
    gs = gwstack.module_stack("gw-cluster", gateways=0)
    start_cluster(gs.S.redis_auth, users=[gs.S.redis_acl_rules["onsale-gateway"]])
    ports = _CLUSTER["ports"]
    nodes = ",".join(f"{HOST}:{p}" for p in ports)
    for name in ("c1", "c2"):
        gs.add_gateway(name, redis_cluster=nodes)


def redis_at(port):
    conns = _CLUSTER.setdefault("conns", {})
    if port not in conns:
        conns[port] = stack.Redis(port, auth=_CLUSTER["auth"])
    return conns[port]


def node_of(key):
    """The Redis (of the cluster) that serves key."""
    first = redis_at(_CLUSTER["ports"][0])
    slot = first("CLUSTER", "KEYSLOT", key)
    for shard in first("CLUSTER", "SLOTS"):
        if shard[0] <= slot <= shard[1]:
            return redis_at(int(shard[2][1]))
    raise AssertionError(f"no node serves slot {slot}")


class OnCluster(gwstack.GatewayTestCase):
    def test_rooms_on_every_shard_queue_and_admit(self):
        g1, g2 = self.GS.gateways[:2]
        events, shards = [], set()
        while len(shards) < NODES and len(events) < 60:  # rooms until every shard has one
            ev = self.new_room(rate_per_minute=6000)
            events.append(ev)
            shards.add(node_of(f"os:{{{ev}}}:q:cfg").port)
        self.assertEqual(len(shards), NODES)
        for i, ev in enumerate(events[-NODES:]):
            c = (g1 if i % 2 else g2).client()
            try:
                tickets = [self.join(ev, client=c).json["ticket"] for _ in range(5)]
                self.assertEqual([ticket_number(t) for t in tickets], [1, 2, 3, 4, 5])

                def admitted(t=tickets[-1]):
                    r = self.status(ev, t, client=c)
                    return r.status == 200 and r.json["state"] == "admitted"
                stack.wait_for(admitted, 10, what=f"admission in {ev}")
            finally:
                c.close()
            r = node_of(f"os:{{{ev}}}:q:cfg")
            keys = {k.decode() for k in r.scan_keys(f"os:{{{ev}}}:*")}
            self.assertTrue({f"os:{{{ev}}}:q:{k}" for k in ("cfg", "n", "st", "adm", "cb", "sb")}
                            <= keys, keys)
            slots = {r("CLUSTER", "KEYSLOT", k) for k in keys}
            self.assertEqual(len(slots), 1, f"{ev}'s keys span slots {slots}")

    def test_room_list_lost_on_its_shard_heals(self):
        ev = self.new_room(rate_per_minute=60)
        r = node_of("os:gateway:rooms")
        self.assertIn(ev.encode(), r("SMEMBERS", "os:gateway:rooms"))
        r("DEL", "os:gateway:rooms")
        stack.wait_for(lambda: ev.encode() in (r("SMEMBERS", "os:gateway:rooms") or []), 15,
                       what="the room list re-added by the gateways")
        # and a gateway that starts now discovers the room through it
        g3 = self.GS.add_gateway("c3", redis_cluster=",".join(
            f"{HOST}:{p}" for p in _CLUSTER["ports"]))
        time.sleep(0.5)
        r3 = self.GS.admin("GET", "/admin/events", gw=g3)
        self.assertIn(ev, [e["event"] for e in r3.json["events"]])
