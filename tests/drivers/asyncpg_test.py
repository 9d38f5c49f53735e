#!/usr/bin/python3
"""asyncpg against a PostgreSQL URL, with its default statement cache.

usage: asyncpg_test.py URL      (postgresql://USER:PASS@HOST:PORT/DB?sslmode=disable)

8 tasks, each on its own connection (see README.md for the workload and checks).
Exit 0 only if every check held and no statement failed.
"""
import asyncio
import os
import sys
import time

import asyncpg

from drvcommon import (ACCOUNTS, CANCEL_AFTER_S, CANCEL_LIMIT_S, ITERATIONS, REF_ROWS,
                       START_BALANCE, WORKERS, ZONES, Report, WorkerStats, ops_order, probe,
                       setup_sql, statements, tables)

DRIVER = "asyncpg"
DEADLINE_S = 50


async def cancel_check(conn, rep, label=""):
    """asyncpg's cancel API is task cancellation (or a query timeout): cancelling the
    awaiting task makes asyncpg send a CancelRequest on a new connection. asyncpg
    raises CancelledError to the task and swallows the server's 57014 ErrorResponse,
    so SQLSTATE 57014 is not observable through its public API; what is checked
    instead is that the task ends within 1 s, and that SELECT 1 on the same connection
    (which asyncpg runs only once the cancelled query's ReadyForQuery has arrived)
    also completes within 1 s of the cancel - it would take ~29 s had the server-side
    pg_sleep(30) not been cancelled."""
    rep.cancel_done = True
    task = asyncio.ensure_future(conn.fetchval("SELECT pg_sleep(30)"))
    await asyncio.sleep(CANCEL_AFTER_S)
    t0 = time.monotonic()
    task.cancel()
    outcome = "completed"
    try:
        await asyncio.wait_for(asyncio.shield(task), timeout=35)
    except asyncio.CancelledError:
        outcome = "CancelledError"
    except Exception as e:  # pragma: no cover - reported
        outcome = f"{type(e).__name__}: {e}"
    t_end = time.monotonic() - t0
    one = await asyncio.wait_for(conn.fetchval("SELECT 1"), timeout=35)
    t_one = time.monotonic() - t0
    rep.check(outcome == "CancelledError" and t_end <= CANCEL_LIMIT_S
              and one == 1 and t_one <= CANCEL_LIMIT_S,
              "cancel pg_sleep(30) via task cancellation" + label,
              f"outcome {outcome} after {t_end:.3f}s; SELECT 1 on the same connection -> {one!r} "
              f"{t_one:.3f}s after the cancel (SQLSTATE not exposed by asyncpg)")


async def ddl_check(url, rep):
    """asyncpg re-prepares a statement once when the origin says "cached plan must
    not change result type" (0A000) outside a transaction. Four connections cache
    `SELECT * FROM <t> WHERE id = $1`; one adds a column through the same URL, and
    then (if DRV_DIRECT_URL names the origin) a direct connection drops it, bypassing
    the pooler. Every connection must then read the new row shape without an error:
    its retry must not meet the stale statement on another pooled connection."""
    table = "drv_asyncpg_ddl"
    sql = f"SELECT * FROM {table} WHERE id = $1"
    conns = []
    try:
        setup = await asyncpg.connect(url)
        await setup.execute(f"DROP TABLE IF EXISTS {table}")
        await setup.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, a int NOT NULL)")
        await setup.execute(f"INSERT INTO {table} VALUES (1, 10)")
        await setup.close()
        conns = [await asyncpg.connect(url) for _ in range(4)]
        shapes = []
        for _ in range(2):
            for c in conns:
                shapes.append(len(await c.fetchrow(sql, 1)))
        await conns[0].execute(f"ALTER TABLE {table} ADD COLUMN b int NOT NULL DEFAULT 7")
        after_add = [tuple(await c.fetchrow(sql, 1)) for c in conns]
        rep.check(set(shapes) == {2} and after_add == [(1, 10, 7)] * 4,
                  "re-prepare after ALTER TABLE through the pooler",
                  f"rows before {sorted(set(shapes))} columns, after ADD COLUMN {after_add}")
        direct = os.environ.get("DRV_DIRECT_URL")
        if direct:
            d = await asyncpg.connect(direct)
            await d.execute(f"ALTER TABLE {table} DROP COLUMN b")
            await d.close()
            after_drop = [tuple(await c.fetchrow(sql, 1)) for c in conns]
            rep.check(after_drop == [(1, 10)] * 4, "re-prepare after ALTER TABLE that bypassed the pooler",
                      f"after DROP COLUMN on a direct connection {after_drop}")
    except Exception as e:
        rep.error("ddl check", e)
    finally:
        for c in conns:
            await c.close(timeout=5)


async def worker(w, url, rep, S, stats, balances):
    zone = ZONES[w]
    a, b = 2 * w + 1, 2 * w + 2
    bal = {a: START_BALANCE, b: START_BALANCE}
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(f"SET TimeZone = '{zone}'")
        stats.tz("after SET", await conn.fetchval("SHOW TimeZone"), zone)
        pkey, mult = probe(w)
        for i in range(ITERATIONS):
            for op in ops_order(w):
                if op == "ref":
                    k = (w * 7 + i) % REF_ROWS + 1
                    got = await conn.fetchval(S["ref"], k)
                    stats.reads += 1
                    if got != f"v{k}":
                        stats.bad_read(f"ref {k}", got, f"v{k}")
                elif op == "balance":
                    acct = a if i % 2 else b
                    got = await conn.fetchval(S["balance"], acct)
                    stats.reads += 1
                    if got != bal[acct]:
                        stats.bad_read(f"balance {acct}", got, bal[acct])
                elif op == "probe":
                    x = i + w
                    got = await conn.fetchval(S[pkey], x)
                    stats.reads += 1
                    if got != x * mult:
                        stats.bad_read(f"{pkey}({x})", got, x * mult)
                elif op == "pair":
                    got = await conn.fetchval(S["pair"], a, b)
                    stats.reads += 1
                    if got != bal[a] + bal[b]:
                        stats.bad_read("pair sum", got, bal[a] + bal[b])
                elif op == "transfer":
                    amt = i % 5 + 1
                    src, dst = (a, b) if i % 2 == 0 else (b, a)
                    tr = conn.transaction()
                    await tr.start()
                    try:
                        await conn.execute(S["credit"], amt, dst)
                        await conn.execute(S["debit"], amt, src)
                        got = await conn.fetchval(S["balance"], dst)
                        stats.reads += 1
                        if got != bal[dst] + amt:
                            stats.bad_read(f"in-transaction balance {dst}", got, bal[dst] + amt)
                        if i % 4 == 0:
                            stats.tz("inside a transaction", await conn.fetchval("SHOW TimeZone"), zone)
                    except BaseException:
                        await tr.rollback()
                        raise
                    if i % 10 == 9:
                        await tr.rollback()
                        stats.rollbacks += 1
                    else:
                        await tr.commit()
                        stats.commits += 1
                        bal[dst] += amt
                        bal[src] -= amt
            if i % 6 == 0:
                stats.tz(f"iteration {i}", await conn.fetchval("SHOW TimeZone"), zone)
            if w == 0 and i == ITERATIONS // 2:
                await cancel_check(conn, rep)
            stats.done += 1
        stats.tz("at the end", await conn.fetchval("SHOW TimeZone"), zone)
    finally:
        balances.update(bal)
        await conn.close(timeout=5)


async def main(url):
    rep = Report(DRIVER)
    S = statements(DRIVER)
    acc, _ = tables(DRIVER)
    try:
        conn = await asyncpg.connect(url)
        for sql in setup_sql(DRIVER):
            await conn.execute(sql)
        await conn.close()
        rep.check(True, "setup", f"{acc} with {ACCOUNTS} accounts")
    except Exception as e:
        rep.error("setup", e)
        rep.finish()

    stats = [WorkerStats(w) for w in range(WORKERS)]
    balances = {}

    async def guarded(w):
        try:
            await worker(w, url, rep, S, stats[w], balances)
        except Exception as e:
            rep.error(f"worker {w} iteration {stats[w].done}", e)

    try:
        await asyncio.wait_for(asyncio.gather(*(guarded(w) for w in range(WORKERS))), DEADLINE_S)
    except asyncio.TimeoutError as e:
        rep.error(f"workers did not finish within {DEADLINE_S}s", e)
    for w in range(WORKERS):
        stats[w].report(rep, ZONES[w])
    if not getattr(rep, "cancel_done", False):
        # Worker 0 stopped before its mid-run cancel: still say whether cancel works.
        try:
            conn = await asyncpg.connect(url)
            await cancel_check(conn, rep, " (own connection: worker 0 stopped early)")
            await conn.close(timeout=5)
        except Exception as e:
            rep.error("cancel check", e)

    await ddl_check(url, rep)

    try:
        conn = await asyncpg.connect(url)
        rows = await conn.fetch(f"SELECT id, balance FROM {acc} ORDER BY id")
        total = await conn.fetchval(f"SELECT sum(balance)::bigint FROM {acc}")
        await conn.close()
        got = {r["id"]: r["balance"] for r in rows}
        wrong = [f"{k}: {got.get(k)} != {v}" for k, v in sorted(balances.items()) if got.get(k) != v]
        rep.check(not wrong and len(balances) == ACCOUNTS, "final balances match committed transfers",
                  "; ".join(wrong[:5]) or f"{len(balances)} accounts")
        rep.check(total == ACCOUNTS * START_BALANCE, "sum invariant",
                  f"sum {total}, want {ACCOUNTS * START_BALANCE}")
    except Exception as e:
        rep.error("final check", e)
    rep.finish()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    asyncio.run(main(sys.argv[1]))
