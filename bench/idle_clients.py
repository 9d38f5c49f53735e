#!/usr/bin/env python3
"""Memory per idle client, and latency with idle clients held: opens N
connections to a target, runs one SELECT 1 on each (so a pooler sets up
whatever per-client state real use needs; --query picks it), holds them all
open, and measures the pooler's resident memory before and after.

  idle_clients.py --host H --port P --user U --password PW --database D -n 1000 --pid PID

With --latency-seconds S (default 0 = off), while the N connections are still
held (after the memory measurement), one more client runs each
--latency-query (repeatable; default SELECT 1) back to back over the simple
protocol for S seconds: pgbench -n -M simple -c1 -j1 -T S -f FILE --log, and
the per-transaction latencies of its log (3rd column, µs) give p50/p90/p99.
pgbench, not this Python process, does the timing, so the event loop's own
overhead is not in the figure.

  idle_clients.py ... -n 10000 --pid PID --latency-seconds 5 \\
      --latency-query 'SELECT 1' --latency-query 'SELECT now()'

With --warmup W, W clients (each running --query) are opened and kept
before the "before" RSS is read, so kb_per_client is the marginal cost of
the N clients, without what the first ones cause once (hyperpool reads the
origin's catalog for its first cacheability decision, about 1 MB, and opens
its pool's connections); docs/performance.md, "Per-unit state at the
sweep". Errors count both batches.

Prints one JSON object. With --pid 0 (direct PostgreSQL) it reports instead the
average proportional set size (Pss, /proc/PID/smaps_rollup) of the backends the
connections got: a PostgreSQL backend is a process, so this is not comparable
to a pooler's per-client bytes, but it is what a direct client costs.

Connections are opened --concurrency at a time (default 25), far below a
listen backlog (PgBouncer's listen_backlog is 128, somaxconn caps all), so a
pooler is not flooded with SYNs it cannot accept; n_open and the errors
(counted by kind) say how many were really held.

Uses asyncpg (Debian python3-asyncpg), run with /usr/bin/python3.
"""

import argparse
import asyncio
import collections
import json
import os
import re
import resource
import shlex
import shutil
import signal
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from pgbench_run import read_latency_log  # noqa: E402


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


def shown_command(argv):
    """This script's command line, runnable from the repository root, password masked."""
    out = [sys.executable, os.path.relpath(os.path.abspath(argv[0]), ROOT)]
    it = iter(argv[1:])
    for a in it:
        if a == "--password":
            out += [a, "***"]
            next(it, None)
        elif a.startswith("--password="):
            out.append("--password=***")
        else:
            out.append(a)
    return shlex.join(out)


def quantile(values, p):
    """values sorted; the same rule as bench/pgbench_run.py."""
    return values[min(len(values) - 1, int(p * len(values)))]


async def pgbench_latency(args, query, tmpdir, index):
    """One client, the query back to back for args.latency_seconds, simple protocol."""
    script = os.path.join(tmpdir, f"q{index}.sql")
    with open(script, "w") as f:
        f.write(query.rstrip().rstrip(";") + ";\n")
    prefix = os.path.join(tmpdir, f"lat{index}")
    cmd = [args.pgbench, "-n", "-M", "simple", "-c1", "-j1", "-T", str(args.latency_seconds),
           "-f", script, "--log", "--log-prefix=" + prefix,
           "-h", args.host, "-p", str(args.port), "-U", args.user, args.database]
    env = dict(os.environ, PGPASSWORD=args.password, PGSSLMODE="disable",
               PGAPPNAME="hyperpool-bench")
    # FILE holds the query and a ';'; the log is PREFIX.<pid>, removed after reading.
    rec = {"query": query,
           "pgbench": shlex.join(["FILE" if a == script else
                                  "--log-prefix=PREFIX" if a.startswith("--log-prefix=") else a
                                  for a in cmd])}
    t0 = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *cmd, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), args.latency_seconds + 60)
    except asyncio.TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
        rec["error"] = "pgbench timed out"
    rec["wall_s"] = round(time.monotonic() - t0, 2)
    text = out.decode(errors="replace") + err.decode(errors="replace")
    values = read_latency_log(prefix)
    m = re.search(r"number of failed transactions: (\d+)", text)
    failed = int(m.group(1)) if m else 0
    m = re.search(r"tps = ([\d.]+) \(without initial connection time\)", text)
    if m:
        rec["tps"] = round(float(m.group(1)), 1)
    if failed:
        rec["failed"] = failed
    if proc.returncode != 0 or failed or not values:
        lines = [ln.strip() for ln in text.splitlines()
                 if re.search(r"error|fatal|abort|could not|timed out", ln, re.I)]
        rec.setdefault("error", (" | ".join(dict.fromkeys(lines)) or
                                 f"pgbench exited {proc.returncode} with no latencies")[:400])
    rec["count"] = len(values)
    if values:
        values.sort()
        for p in (50, 90, 99):
            rec[f"p{p}_ms"] = round(quantile(values, p / 100) / 1000, 4)
        rec["mean_ms"] = round(sum(values) / len(values) / 1000, 4)
        rec["max_ms"] = round(values[-1] / 1000, 3)
    return rec


async def main():
    ap = argparse.ArgumentParser()
    for name in ("host", "port", "user", "password", "database"):
        ap.add_argument("--" + name, required=True)
    ap.add_argument("-n", type=int, default=1000)
    ap.add_argument("--pid", type=int, default=0)
    ap.add_argument("--concurrency", type=int, default=25,
                    help="connections opened at once (keep it well below the pooler's listen backlog)")
    ap.add_argument("--hold", type=float, default=1.0, help="seconds to settle before measuring")
    ap.add_argument("--prepared", action="store_true",
                    help="run --query as a prepared statement the client keeps (asyncpg's statement cache), "
                         "as drivers that cache statements leave their sessions")
    ap.add_argument("--query", default="SELECT 1",
                    help="the statement each client runs once (simple protocol); SELECT 1 is a "
                         "cache hit at hyperpool's Client, so pass e.g. 'SELECT now()' to measure "
                         "clients whose session reached the origin")
    ap.add_argument("--latency-seconds", type=int, default=0,
                    help="with the N clients held, time one more client running each "
                         "--latency-query back to back for this many seconds (pgbench; 0 = off)")
    ap.add_argument("--latency-query", action="append", default=None,
                    help="statement for the latency client (repeatable; default SELECT 1)")
    ap.add_argument("--pgbench", default="pgbench")
    ap.add_argument("--warmup", type=int, default=0,
                    help="open this many clients (each running --query) and keep them before "
                         "rss_before is read: kb_per_client is then the marginal cost, without what "
                         "the first clients cause once (hyperpool's catalog snapshot, its pool's "
                         "origin connections)")
    args = ap.parse_args()
    queries = args.latency_query or ["SELECT 1"]

    import asyncpg

    # Each held connection is a descriptor here (and one in the pooler, which
    # has its own limit: bench/run.sh raises the shell's before starting it).
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = args.n + 256
    if soft < want:
        soft = min(want, hard) if hard != resource.RLIM_INFINITY else want
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    result = {"n_requested": args.n, "pid": args.pid, "query": args.query,
              "concurrency": args.concurrency, "nofile_limit": soft,
              "command": shown_command(sys.argv)}
    if soft < want:
        result["warning"] = f"RLIMIT_NOFILE hard limit {hard} < {want}: not all clients can be held"
    conns, errors = [], collections.Counter()
    sem = asyncio.Semaphore(args.concurrency)

    async def one(into=None):
        async with sem:
            c = None
            try:
                c = await asyncpg.connect(host=args.host, port=int(args.port), user=args.user,
                                          password=args.password, database=args.database,
                                          ssl=False, timeout=60, statement_cache_size=100 if args.prepared else 0)
                if args.prepared:
                    await c.fetchval(args.query)  # asyncpg's statement cache: a named statement kept
                else:
                    await c.execute(args.query)  # simple protocol: no prepared statement
                (conns if into is None else into).append(c)
            except Exception as e:  # noqa: BLE001 - report, don't crash
                errors[f"{type(e).__name__}: {e}"[:300]] += 1
                if c is not None:
                    c.terminate()

    warm = []
    if args.warmup > 0:
        await asyncio.gather(*(one(warm) for _ in range(args.warmup)))
        result["warmup_open"] = len(warm)
        await asyncio.sleep(args.hold)
    if args.pid:
        time.sleep(0.5)
        result["rss_before_kb"] = status_kb(args.pid, "VmRSS")
    t0 = time.monotonic()
    await asyncio.gather(*(one() for _ in range(args.n)))
    result["connect_s"] = round(time.monotonic() - t0, 2)
    result["n_open"] = len(conns)
    result["errors"] = sum(errors.values())
    if errors:
        result["first_error"] = errors.most_common(1)[0][0]
        result["error_kinds"] = dict(errors.most_common(5))
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

    if args.latency_seconds > 0:
        result["latency_seconds"] = args.latency_seconds
        tmpdir = tempfile.mkdtemp(prefix="idle-lat-")
        try:
            result["latency"] = [await pgbench_latency(args, q, tmpdir, i)
                                 for i, q in enumerate(queries)]
        finally:
            shutil.rmtree(tmpdir, ignore_errors=True)
        # Held for the whole measurement? (asyncpg marks a connection the
        # server or pooler dropped as closed while the event loop runs.)
        result["n_open_after_latency"] = sum(1 for c in conns if not c.is_closed())
        if args.pid:
            try:
                result["rss_after_latency_kb"] = status_kb(args.pid, "VmRSS")
            except OSError:
                result["warning"] = f"pooler process {args.pid} is gone after the latency measurement"

    await asyncio.gather(*(c.close(timeout=10) for c in conns + warm), return_exceptions=True)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    # Die by the signal on Ctrl-C, so that run.sh (bash) sees it and stops too.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.exit(asyncio.run(main()))
