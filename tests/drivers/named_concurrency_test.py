#!/usr/bin/env python3
"""Named prepared statements shared by concurrent sessions, asyncpg (issue 28
item 1; the node-postgres / postgres.js version is named_concurrency_test.mjs).
8 asyncpg connections each loop over three statements (asyncpg names them
__asyncpg_stmt_N__ per connection, so one name stands for different texts on
different connections) with the same values every time (the query cache holds
and coalesces them), an explicitly prepared statement, and a short write
transaction. No execution may fail and every committed increment must be
there.

usage: named_concurrency_test.py URL
"""
import asyncio
import sys

import asyncpg

CLIENTS = 8
ROUNDS = 40
NAMES = 3
TABLE = "drv_named_counter_py"
DEADLINE_S = 50


async def client(url, i, stats):
    c = await asyncpg.connect(url)
    try:
        explicit = await c.prepare("SELECT $1::int * 10 AS s")
        for r in range(ROUNDS):
            for k in range(NAMES):
                n = (i + r + k) % NAMES
                try:
                    v = await c.fetchval(f"SELECT $1::int + $2::int + {n} AS s", 1, 2)
                    if v != 3 + n:
                        stats["bad"].append(f"client {i}: add{n} = {v}")
                except asyncpg.PostgresError as e:
                    stats["errors"].append(f"client {i} add{n}: [{e.sqlstate}] {e}")
            try:
                v = await explicit.fetchval(r)
                if v != 10 * r:
                    stats["bad"].append(f"client {i}: explicit({r}) = {v}")
                async with c.transaction():
                    await c.execute(f"UPDATE {TABLE} SET n = n + 1 WHERE id = $1", i)
                stats["commits"][i] += 1
            except asyncpg.PostgresError as e:
                stats["errors"].append(f"client {i} explicit/transaction: [{e.sqlstate}] {e}")
    finally:
        await c.close()


async def main(url):
    setup = await asyncpg.connect(url)
    await setup.execute(f"DROP TABLE IF EXISTS {TABLE}")
    await setup.execute(f"CREATE TABLE {TABLE} (id int PRIMARY KEY, n bigint NOT NULL)")
    await setup.execute(f"INSERT INTO {TABLE} SELECT g, 0 FROM generate_series(0, {CLIENTS - 1}) g")
    stats = {"bad": [], "errors": [], "commits": [0] * CLIENTS}
    failed = 0
    try:
        await asyncio.wait_for(asyncio.gather(*(client(url, i, stats) for i in range(CLIENTS))), DEADLINE_S)
        finished = True
    except asyncio.TimeoutError:
        finished = False
    rows = await setup.fetch(f"SELECT id, n FROM {TABLE} ORDER BY id")
    await setup.close()
    lost = [r["n"] - stats["commits"][r["id"]] for r in rows if r["n"] != stats["commits"][r["id"]]]
    checks = [
        (finished, f"asyncpg: {CLIENTS} clients finished", ""),
        (not stats["errors"], "asyncpg: no errors",
         f"{len(stats['errors'])} errors: " + "; ".join(stats["errors"][:5]) if stats["errors"] else ""),
        (not stats["bad"], "asyncpg: every result right", "; ".join(stats["bad"][:5])),
        (not lost, "asyncpg: committed counters", f"off by {lost}" if lost else ""),
    ]
    for ok, name, detail in checks:
        print(f"{'ok  ' if ok else 'FAIL'} named_concurrency_py: {name}{' - ' + detail if detail else ''}")
        failed += 0 if ok else 1
    print(f"SUMMARY named_concurrency_py: {'PASS' if not failed else 'FAIL'} "
          f"({len(checks) - failed} checks passed, {failed} failed)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1])))
