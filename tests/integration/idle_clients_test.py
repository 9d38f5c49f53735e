#!/usr/bin/python3
"""Idle clients hold no coroutine and no read buffer (issue 26), asyncpg
through `hyperpool serve` with its defaults (cache on):

- 40 clients give their sessions state first: a setting (SET
  application_name), a named protocol-level prepared statement
  (asyncpg's prepare) and a query that reaches the origin;
- 1,000 clients then log in and run SELECT 1 (answered by the Client's
  cache tier after the first), and are held idle: the pooler's resident
  memory grows by at most 5 kB per held client (6.3-6.6 kB before idle
  sessions parked; bench/idle_clients.py measures the same);
- every held client then runs a query and gets its answer, and each of the
  40 still has its setting and its prepared statement.

Needs HYPERPOOL_BINARY and HYPERPOOL_TEST_PG_ENV (ctest sets both).
"""
import asyncio
import resource

import asyncpg

from pgtest_env import check, fail, origin_url, start_serve, stop_serve  # beside this script

N = 1000
STATEFUL = 40
MAX_KB_PER_CLIENT = 5.0
STEPS = 4


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def main(url, pid):
    sem = asyncio.Semaphore(25)

    async def connect():
        async with sem:
            return await asyncpg.connect(dsn=url, ssl=False, timeout=60, statement_cache_size=0)

    stateful = []
    for i in range(STATEFUL):
        c = await connect()
        await c.execute(f"SET application_name = 'idle_{i}'")
        ps = await c.prepare("SELECT $1::int * 2 + 0 * length(now()::text)")
        check_now = await c.fetchval("SELECT now() IS NOT NULL")
        if not check_now:
            fail("SELECT now() answered")
        stateful.append((c, ps))
    check(True, f"{STATEFUL} clients with a setting and a prepared statement")

    async def one():
        c = await connect()
        await c.execute("SELECT 1")
        return c
    # In STEPS waves, the median of the waves' growth per client: a one-off
    # allocation of the process meanwhile (a catalog re-read, a thread's
    # malloc arena) lands in one wave and does not count as per-client cost.
    held = []
    per_wave = []
    for _ in range(STEPS):
        before = rss_kb(pid)
        held += await asyncio.gather(*(one() for _ in range(N // STEPS)))
        per_wave.append((rss_kb(pid) - before) / (N // STEPS))
    per_wave.sort()
    per_client = (per_wave[STEPS // 2 - 1] + per_wave[STEPS // 2]) / 2
    check(per_client <= MAX_KB_PER_CLIENT,
          f"{N} idle clients held: {per_client:.2f} kB of RSS each, the median of {STEPS} waves "
          f"({', '.join(f'{w:.2f}' for w in per_wave)}; at most {MAX_KB_PER_CLIENT})")

    results = await asyncio.gather(*(c.fetchval("SELECT $1::int", i) for i, c in enumerate(held)))
    check(results == list(range(N)), f"each of the {N} idle clients runs a query afterwards")
    for i, (c, ps) in enumerate(stateful):
        if await ps.fetchval(i) != 2 * i:
            fail(f"client {i}: its prepared statement answers after being idle")
        if await c.fetchval("SHOW application_name") != f"idle_{i}":
            fail(f"client {i}: its setting survived being idle")
    check(True, f"the {STATEFUL} stateful clients kept their prepared statements and settings")
    await asyncio.gather(*(c.close() for c in held))
    await asyncio.gather(*(c.close() for c, _ in stateful))


soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if soft < 2 * N + 256:
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4 * N), hard))
proc, url = start_serve(["--origin", origin_url(), "--pool-size", "4"])
try:
    asyncio.run(main(url, proc.pid))
finally:
    stop_serve(proc, 20)
