#!/usr/bin/env python3
"""Memory per idle client: opens N connections to a target, runs one SELECT 1 on
each (so a pooler sets up whatever per-client state real use needs; --query
picks it), holds them
all open, and measures the pooler's resident memory before and after.

  idle_clients.py --host H --port P --user U --password PW --database D -n 1000 --pid PID

Prints one JSON object. With --pid 0 (direct PostgreSQL) it reports instead the
average proportional set size (Pss, /proc/PID/smaps_rollup) of the backends the
connections got: a PostgreSQL backend is a process, so this is not comparable
to a pooler's per-client bytes, but it is what a direct client costs.

Uses asyncpg (Debian python3-asyncpg), run with /usr/bin/python3.
"""

import argparse
import asyncio
import json
import resource
import signal
import sys
import time


def status_kb(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def pss_kb(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


async def main():
    ap = argparse.ArgumentParser()
    for name in ("host", "port", "user", "password", "database"):
        ap.add_argument("--" + name, required=True)
    ap.add_argument("-n", type=int, default=1000)
    ap.add_argument("--pid", type=int, default=0)
    ap.add_argument("--concurrency", type=int, default=25, help="connections opened at once")
    ap.add_argument("--hold", type=float, default=1.0, help="seconds to settle before measuring")
    ap.add_argument("--query", default="SELECT 1",
                    help="the statement each client runs once (simple protocol); SELECT 1 is a "
                         "cache hit at hyperpool's Client, so pass e.g. 'SELECT now()' to measure "
                         "clients whose session reached the origin")
    args = ap.parse_args()

    import asyncpg

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = args.n + 256
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(want, soft), hard), hard))

    result = {"n_requested": args.n, "pid": args.pid, "query": args.query}
    if args.pid:
        time.sleep(0.5)
        result["rss_before_kb"] = status_kb(args.pid, "VmRSS")
    conns, errors = [], []
    sem = asyncio.Semaphore(args.concurrency)

    async def one():
        async with sem:
            try:
                c = await asyncpg.connect(host=args.host, port=int(args.port), user=args.user,
                                          password=args.password, database=args.database,
                                          ssl=False, timeout=60, statement_cache_size=0)
                await c.execute(args.query)  # simple protocol: no prepared statement
                conns.append(c)
            except Exception as e:  # noqa: BLE001 - report, don't crash
                errors.append(f"{type(e).__name__}: {e}")

    t0 = time.monotonic()
    await asyncio.gather(*(one() for _ in range(args.n)))
    result["connect_s"] = round(time.monotonic() - t0, 2)
    result["n_open"] = len(conns)
    result["errors"] = len(errors)
    if errors:
        result["first_error"] = errors[0][:300]
    await asyncio.sleep(args.hold)
    if args.pid:
        result["rss_after_kb"] = status_kb(args.pid, "VmRSS")
        if conns:
            result["kb_per_client"] = round(
                (result["rss_after_kb"] - result["rss_before_kb"]) / len(conns), 2)
    elif conns:
        sample = conns[:200]
        pids = [await c.fetchval("SELECT pg_backend_pid()") for c in sample]
        pss = [pss_kb(p) for p in pids]
        pss = [p for p in pss if p]
        if pss:
            result["backend_pss_kb"] = round(sum(pss) / len(pss), 1)
    await asyncio.gather(*(c.close(timeout=10) for c in conns), return_exceptions=True)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    # Die by the signal on Ctrl-C, so that run.sh (bash) sees it and stops too.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.exit(asyncio.run(main()))
