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
- 1,000 more clients log in and run SELECT now(), which reaches the origin
  (an Endpoint session each: SessionCore, settings, statements), and are
  held idle on top of the first 1,000: at most 7.5 kB each (8.5-9.0 kB
  measured here before idle Endpoint sessions gave back their buffers and
  kept one copy of their hello and settings, 6.5-7.1 kB after; measured
  alone with bench/idle_clients.py --query 'SELECT now()': 11.0 -> 9.1 kB);
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
MAX_KB_PER_ORIGIN_CLIENT = 7.5
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

    async def one(query):
        c = await connect()
        await c.execute(query)
        return c

    # In STEPS waves, the median of the waves' growth per client: a one-off
    # allocation of the process meanwhile (a catalog re-read, a thread's
    # malloc arena) lands in one wave and does not count as per-client cost.
    async def hold(query, what, bound):
        clients = []
        per_wave = []
        for _ in range(STEPS):
            before = rss_kb(pid)
            clients += await asyncio.gather(*(one(query) for _ in range(N // STEPS)))
            per_wave.append((rss_kb(pid) - before) / (N // STEPS))
        per_wave.sort()
        per_client = (per_wave[STEPS // 2 - 1] + per_wave[STEPS // 2]) / 2
        check(per_client <= bound,
              f"{N} idle clients held ({what}): {per_client:.2f} kB of RSS each, the median of {STEPS} waves "
              f"({', '.join(f'{w:.2f}' for w in per_wave)}; at most {bound})")
        return clients

    held = await hold("SELECT 1", "SELECT 1, answered by the Client tier", MAX_KB_PER_CLIENT)
    held += await hold("SELECT now()", "SELECT now(): their sessions reached the origin", MAX_KB_PER_ORIGIN_CLIENT)

    results = await asyncio.gather(*(c.fetchval("SELECT $1::int", i) for i, c in enumerate(held)))
    check(results == list(range(len(held))), f"each of the {len(held)} idle clients runs a query afterwards")
    for i, (c, ps) in enumerate(stateful):
        if await ps.fetchval(i) != 2 * i:
            fail(f"client {i}: its prepared statement answers after being idle")
        if await c.fetchval("SHOW application_name") != f"idle_{i}":
            fail(f"client {i}: its setting survived being idle")
    check(True, f"the {STATEFUL} stateful clients kept their prepared statements and settings")
    await asyncio.gather(*(c.close() for c in held))
    await asyncio.gather(*(c.close() for c, _ in stateful))


soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if soft < 4 * N + 256:
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8 * N), hard))
proc, url = start_serve(["--origin", origin_url(), "--pool-size", "4"])
try:
    asyncio.run(main(url, proc.pid))
finally:
    stop_serve(proc, 20)
