#!/usr/bin/python3
"""DDL made directly on the origin, not through hyperpool, between clients
that prepare the same statement (docs/architecture.md, "Prepared
statements": candidates). A direct connection parses a client's statement
when the client asks, so a statement parsed after the DDL can never fail
with "cached plan must not change result type" (0A000). Through `hyperpool
serve` with its defaults (cache on), a pool of 2:

- 8 asyncpg clients and a psycopg client (prepare=True) prepare and run one
  text; the table is dropped and re-created directly with another column
  type;
- 8 new asyncpg clients, each inside a transaction (where asyncpg does not
  re-prepare on InvalidCachedStatementError), a new psycopg client with a
  prepared statement in a transaction, and new clients outside one, all at
  once, get the new rows, as a direct connection does. Before the fix their
  Parse was mapped onto the server statement made before the DDL: asyncpg
  failed at prepare with InvalidCachedStatementError;
- the clients that prepared before the DDL get 0A000 inside a transaction,
  as they do directly.

Needs HYPERPOOL_BINARY and HYPERPOOL_TEST_PG_ENV (ctest sets both).
"""
import asyncio

import asyncpg
import psycopg

from pgtest_env import check, origin_url, start_serve, stop_serve

TABLE = "ddl_elsewhere_t"
QUERY = f"SELECT id, v FROM {TABLE} ORDER BY id"
N = 8


async def connect(url):
    return await asyncpg.connect(dsn=url, ssl=False, timeout=30)


async def in_txn(conn):
    try:
        async with conn.transaction():
            return ("rows", [tuple(r) for r in await conn.fetch(QUERY)])
    except asyncpg.exceptions.InvalidCachedStatementError:
        return ("0A000", None)


async def plain(conn):
    return ("rows", [tuple(r) for r in await conn.fetch(QUERY)])


def psycopg_prepared(url, txn):
    with psycopg.connect(url, autocommit=not txn) as c:
        try:
            return ("rows", [tuple(r) for r in c.execute(QUERY, prepare=True).fetchall()])
        except psycopg.errors.FeatureNotSupported:
            return ("0A000", None)


async def scenario(url, direct):
    ddl = await connect(direct)
    await ddl.execute(f"DROP TABLE IF EXISTS {TABLE}; CREATE TABLE {TABLE} (id int, v int);"
                      f"INSERT INTO {TABLE} VALUES (1, 10)")
    before = [await connect(url) for _ in range(N)]
    for _ in range(3):
        got = await asyncio.gather(*(plain(c) for c in before))
        check(all(g == ("rows", [(1, 10)]) for g in got), f"{N} clients read the first table ({got[0]})")
    old_psycopg = psycopg.connect(url)
    check(old_psycopg.execute(QUERY, prepare=True).fetchall() == [(1, 10)], "psycopg prepared it too")
    old_psycopg.commit()

    await ddl.execute(f"DROP TABLE {TABLE}; CREATE TABLE {TABLE} (id int, v text);"
                      f"INSERT INTO {TABLE} VALUES (1, 'ten')")
    want = ("rows", [(1, "ten")])
    after = [await connect(url) for _ in range(2 * N)]
    results = await asyncio.gather(*(in_txn(c) for c in after[:N]), *(plain(c) for c in after[N:]))
    check(all(r == want for r in results),
          f"{2 * N} clients that prepare after the DDL read the new table, in a transaction or not, no 0A000 "
          f"({sorted(set(map(str, results)))})")
    direct_results = [await in_txn(await connect(direct)) for _ in range(2)]
    check(all(r == want for r in direct_results), f"as directly ({direct_results[0]})")
    r = await asyncio.to_thread(psycopg_prepared, url, True)
    check(r == want, f"a new psycopg client's prepared statement in a transaction reads the new table ({r})")
    r = await asyncio.to_thread(psycopg_prepared, url, False)
    check(r == want, f"...and outside one ({r})")

    # Prepared before the DDL: 0A000 in a transaction, as directly.
    old = await asyncio.gather(*(in_txn(c) for c in before[:2]))
    check(all(o[0] == "0A000" for o in old), f"clients that prepared before the DDL get 0A000 in a transaction ({old})")
    # ...and outside one asyncpg re-prepares: the new rows.
    old = await asyncio.gather(*(plain(c) for c in before[2:4]))
    check(all(o == want for o in old), f"...and outside one re-prepare to the new rows ({old})")

    for c in before + after:
        await c.close()
    old_psycopg.close()
    await ddl.execute(f"DROP TABLE {TABLE}")
    await ddl.close()


def main():
    direct = origin_url()
    proc, url = start_serve(["--origin", direct, "--pool-size", "2"])
    try:
        asyncio.run(asyncio.wait_for(scenario(url, direct), 120))
    finally:
        stop_serve(proc)


if __name__ == "__main__":
    main()
    print("PASS")
