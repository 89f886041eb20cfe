"""Latency of a relay daemon at a fixed offered rate, from the producer's INSERT to the line the
relay writes on stdout: one event per producer transaction (psycopg, autocommit), its payload
carrying the producer's clock just before the INSERT; the relay's stdout is read as it comes.
  python3 bench/log-latency.py BIN MODE [RATE=1000] [SECONDS=5]     MODE: log or tx
DATABASE_URL names the server (default postgres://postgres@127.0.0.1:5432/test). Prints one
RESULT line: p50, p99 and max in milliseconds, and how many events arrived.
"""
import json
import os
import subprocess
import sys
import threading
import time

import psycopg

binary, mode = sys.argv[1], sys.argv[2]
rate = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
seconds = float(sys.argv[4]) if len(sys.argv) > 4 else 5
url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test")
schema = f"bench_latency_{mode}"
env = dict(os.environ, DATABASE_URL=url)

with psycopg.connect(url, autocommit=True) as c:
    c.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
subprocess.run([binary, "migrate", "--schema", schema], env=env, check=True, capture_output=True)
if mode == "log":
    subprocess.run([binary, "log", "enable", "--schema", schema], env=env, check=True,
                   capture_output=True)
relay = subprocess.Popen(
    [binary, "relay", "--schema", schema, "--sink", "stdout", "--mode", mode,
     "--poll-interval", "5s"],
    env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)
latencies = []
arrived = threading.Event()


def read():
    for line in relay.stdout:
        now = time.time()
        event = json.loads(line)
        latencies.append((now - event["payload"]["t"]) * 1000)
        arrived.set()


threading.Thread(target=read, daemon=True).start()
insert = (f"INSERT INTO {schema}.outbox (tenant_id, aggregate_type, aggregate_id, event_type, "
          "payload, idempotency_key) VALUES (gen_random_uuid(), 'order', %s, 'order.placed', "
          "jsonb_build_object('t', %s::float8), %s)")
with psycopg.connect(url, autocommit=True) as c:
    # One event first, to know the relay is up; not counted.
    c.execute(insert, ("warm", time.time(), "warm"))
    if not arrived.wait(30):
        sys.exit("the relay sent nothing within 30 s")
    latencies.clear()
    n = int(rate * seconds)
    start = time.monotonic()
    for i in range(n):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        c.execute(insert, (f"o-{i}", time.time(), f"k-{i}"))
    deadline = time.monotonic() + 30
    while len(latencies) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    offered = n / (time.monotonic() - start)
relay.terminate()
relay.wait()
with psycopg.connect(url, autocommit=True) as c:
    c.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
got = sorted(latencies)


def pct(p):
    return got[min(len(got) - 1, int(len(got) * p))] if got else float("nan")


print(f"RESULT mode={mode} rate={rate} offered={offered:.0f}/s events={len(got)} of {n} "
      f"p50_ms={pct(0.50):.2f} p99_ms={pct(0.99):.2f} max_ms={got[-1] if got else float('nan'):.2f}")
