#!/usr/bin/env python3
"""SQL EXECUTE / DEALLOCATE of a statement the driver prepared by protocol
under a name of its choosing (issue 28: asyncpg's `prepare(name='foobar')`
then `EXECUTE foobar`). hyperpool renames protocol statements on the origin
(hp_N), so the SQL text must reach it with hyperpool's name, and a second
Parse of a name the client holds must fail with 42P05 as directly.

8 clients at once (4 asyncpg, 4 psycopg 3 through libpq's PQprepare and
simple Queries), every client preparing the same names with texts of its own,
each round: EXECUTE by the extended protocol and by a simple Query, inside a
transaction block, a duplicate prepare (42P05), DEALLOCATE, then EXECUTE of
the deallocated name (26000). The results must be the client's own and the
errors exactly PostgreSQL's.

usage: sql_execute_test.py URL
"""
import asyncio
import sys

import asyncpg
import psycopg

from drvcommon import Report

CLIENTS = 8
ROUNDS = 12
DEADLINE_S = 50


def expect(stats, who, what, got, want):
    if got != want:
        stats["bad"].append(f"{who}: {what} = {got!r}, expected {want!r}")


async def asyncpg_client(url, i, stats):
    c = await asyncpg.connect(url)
    who = f"asyncpg {i}"
    try:
        for r in range(ROUNDS):
            name = f"hp_exec_{r}"
            base = 1000 * i + r
            ps = await c.prepare(f"SELECT $1::int + {base} AS v", name=name)
            expect(stats, who, "get_name()", ps.get_name(), name)
            expect(stats, who, f"EXECUTE {name}(1)", await c.fetchval(f"EXECUTE {name}(1)"), base + 1)
            async with c.transaction():
                await c.execute("SELECT 1")
                expect(stats, who, f"EXECUTE {name}(2) in a transaction",
                       await c.fetchval(f"EXECUTE {name}(2)"), base + 2)
            try:
                await c.prepare("SELECT 1", name=name)
                stats["bad"].append(f"{who}: a second prepare of {name} succeeded")
            except asyncpg.PostgresError as e:
                expect(stats, who, "second prepare", (e.sqlstate, e.message),
                       ("42P05", f'prepared statement "{name}" already exists'))
            expect(stats, who, "the statement after the failed prepare", await ps.fetchval(3), base + 3)
            await c.execute(f"DEALLOCATE {name}")
            try:
                await c.execute(f"EXECUTE {name}(4)")
                stats["bad"].append(f"{who}: EXECUTE after DEALLOCATE succeeded")
            except asyncpg.PostgresError as e:
                expect(stats, who, "EXECUTE after DEALLOCATE", e.sqlstate, "26000")
            stats["rounds"] += 1
    except Exception as e:  # noqa: BLE001 - reported as a failed check
        stats["errors"].append(f"{who}: {type(e).__name__}: {e}")
    finally:
        await c.close()


def psycopg_client(url, i, stats):
    who = f"psycopg {i}"
    try:
        with psycopg.connect(url, autocommit=True) as c:
            pg = c.pgconn
            for r in range(ROUNDS):
                name = f"hp_exec_{r}"
                base = 1000 * (i + CLIENTS) + r
                res = pg.prepare(name.encode(), f"SELECT $1::int + {base} AS v".encode())
                expect(stats, who, "PQprepare", res.error_message.decode(), "")
                res = pg.exec_(f"EXECUTE {name}(1)".encode())  # simple Query
                expect(stats, who, f"simple EXECUTE {name}(1)", (res.get_value(0, 0), res.error_message.decode()),
                       (str(base + 1).encode(), ""))
                expect(stats, who, f"EXECUTE {name}(2)", c.execute(f"EXECUTE {name}(2)").fetchone()[0], base + 2)
                with c.transaction():
                    expect(stats, who, f"EXECUTE {name}(3) in a transaction",
                           c.execute(f"EXECUTE {name}(3)").fetchone()[0], base + 3)
                res = pg.prepare(name.encode(), b"SELECT 1")
                expect(stats, who, "second PQprepare", res.error_field(psycopg.pq.DiagnosticField.SQLSTATE),
                       b"42P05")
                res = pg.exec_prepared(name.encode(), [b"4"])
                expect(stats, who, "the statement after the failed prepare", res.get_value(0, 0),
                       str(base + 4).encode())
                c.execute(f"DEALLOCATE {name}")
                try:
                    c.execute(f"EXECUTE {name}(5)")
                    stats["bad"].append(f"{who}: EXECUTE after DEALLOCATE succeeded")
                except psycopg.Error as e:
                    expect(stats, who, "EXECUTE after DEALLOCATE", e.sqlstate, "26000")
                stats["rounds"] += 1
    except Exception as e:  # noqa: BLE001 - reported as a failed check
        stats["errors"].append(f"{who}: {type(e).__name__}: {e}")


async def main(url):
    stats = {"bad": [], "errors": [], "rounds": 0}
    half = CLIENTS // 2
    work = [asyncpg_client(url, i, stats) for i in range(half)]
    work += [asyncio.to_thread(psycopg_client, url, i, stats) for i in range(half)]
    try:
        await asyncio.wait_for(asyncio.gather(*work), DEADLINE_S)
        finished = True
    except asyncio.TimeoutError:
        finished = False
    report = Report("sql_execute_py")
    report.check(finished, f"{CLIENTS} clients finished")
    report.check(not stats["errors"], "no unexpected errors", "; ".join(stats["errors"][:5]))
    report.check(not stats["bad"], "every result and error as PostgreSQL gives it",
                 f"{len(stats['bad'])} differ: " + "; ".join(stats["bad"][:5]) if stats["bad"] else "")
    report.check(stats["rounds"] == CLIENTS * ROUNDS, "every round ran", f"{stats['rounds']} of {CLIENTS * ROUNDS}")
    report.finish()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
