#!/usr/bin/env python3
"""bench/cpusplit.py CMD...: runs CMD and prints to stderr where the machine's CPU went while it ran:
wall, machine busy (CPU-seconds and cores), CMD's own user+sys (with its children), and the
CPU-seconds of PostgreSQL (every backend, live or exited), Tansu, NATS, Redis and RabbitMQ."""
import os, subprocess, sys, time
HZ = os.sysconf("SC_CLK_TCK")
def procs():
    out = {}
    for p in os.listdir("/proc"):
        if not p.isdigit(): continue
        try:
            with open(f"/proc/{p}/stat") as f: s = f.read()
        except OSError: continue
        name = s[s.index("(")+1:s.rindex(")")]
        f = s[s.rindex(")")+2:].split()
        out[int(p)] = (name, int(f[11]), int(f[12]), int(f[13]), int(f[14]), int(f[1]))
    return out
def groups(ps):
    g = {}
    for pid, (name, ut, st, cut, cst, ppid) in ps.items():
        key = {"postgres": "postgres", "tansu": "tansu", "nats-server": "nats", "redis-server": "redis", "beam.smp": "rabbitmq"}.get(name)
        if key is None: continue
        v = ut + st
        if key == "postgres" and ps.get(ppid, ("",))[0] != "postgres":
            v += cut + cst  # the postmaster: exited backends
        g[key] = g.get(key, 0) + v
    return g
def machine():
    with open("/proc/stat") as f: v = list(map(int, f.readline().split()[1:]))
    return sum(v) - v[3] - v[4], sum(v)
g0, m0, t0 = groups(procs()), machine(), time.monotonic()
r0 = os.times()
rc = subprocess.call(sys.argv[1:])
r1 = os.times()
t1, m1, g1 = time.monotonic(), machine(), groups(procs())
wall = t1 - t0
busy = (m1[0]-m0[0]) / HZ
cmd = (r1.children_user - r0.children_user) + (r1.children_system - r0.children_system)
parts = " ".join(f"{k}={(g1.get(k,0)-g0.get(k,0))/HZ:.2f}s" for k in sorted(g1))
print(f"cpusplit: wall={wall:.2f}s busy={busy:.2f}s ({busy/wall:.2f} cores) cmd={cmd:.2f}s {parts}", file=sys.stderr)
sys.exit(rc)
