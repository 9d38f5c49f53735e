#!/usr/bin/env python3
"""What a client sees in pg_prepared_statements (issue 28 item 4): psycopg 3
(and asyncpg as another client preparing statements of its own) print the
counts, texts and parameter types they read there; the transcript through
hyperpool must equal the direct one (tests/integration/
driver_transcripts_test.sh). Directly a backend shows only its own
session's statements; through a transaction pool a client must not see the
statements prepared for other clients (or replays of them) on the
connection it is lent.

usage: prepared_view_transcript.py URL
"""
import asyncio
import sys

import asyncpg
import psycopg

URL = sys.argv[1]
COUNT = "select count(*) from pg_prepared_statements"
LIST = "select statement, parameter_types::text from pg_prepared_statements order by prepare_time"


def out(line):
    print(line, flush=True)


def count(conn):
    return conn.execute(COUNT, prepare=False).fetchone()[0]


def listing(conn):
    return conn.execute(LIST, prepare=False).fetchall()


async def asyncpg_other(n):
    """Another client prepares n statements of its own, then leaves."""
    c = await asyncpg.connect(URL)
    for i in range(n):
        await c.fetchval(f"SELECT $1::int + {100 + i}", i)
    await c.close()


def main():
    # Others' statements on the origin connections first (direct: on their own backends).
    other = psycopg.connect(URL, autocommit=True, prepare_threshold=0)
    for i in range(6):
        other.execute(f"select %s::int * {i + 2}", [i])
    asyncio.run(asyncpg_other(5))

    fresh = psycopg.connect(URL, autocommit=True)
    out(f"fresh client: {count(fresh)}")
    for k in range(1, 4):
        fresh.execute(f"select %s::int - {k}", [k], prepare=True)
        out(f"after preparing {k}: {count(fresh)}")
    out(f"listing: {listing(fresh)}")
    with fresh.cursor() as cur:
        cur.execute(COUNT, prepare=False)
        out(f"cursor count: {cur.fetchone()[0]}")
    with psycopg.ClientCursor(fresh) as cur:  # the simple protocol (Query)
        cur.execute(COUNT)
        out(f"simple query count: {cur.fetchone()[0]}")

    # psycopg's own auto-prepare (threshold 5): the count query itself
    # becomes a prepared statement at its 6th execution.
    auto = psycopg.connect(URL, autocommit=True)
    res = [auto.execute(COUNT).fetchone()[0] for _ in range(10)]
    out(f"auto prepare: {res}")

    # Eviction (prepared_max 5, everything prepared): psycopg DEALLOCATEs.
    evict = psycopg.connect(URL, autocommit=True, prepare_threshold=0)
    evict.prepared_max = 5
    for i in range(10):
        evict.execute("select 'a'")
        evict.execute(f"select {i}")
    out(f"after evictions: {listing(evict)}")
    with evict.transaction():
        out(f"in a transaction: {count(evict)}")

    # Parameter types as declared by the driver.
    types = psycopg.connect(URL, autocommit=True)
    types.execute("select %s, %s", [42, "x"], prepare=True)
    out(f"parameter types: {types.execute('select parameter_types::text from pg_prepared_statements').fetchall()}")

    # A client whose own statement reads the view, used again and again.
    again = psycopg.connect(URL, autocommit=True, prepare_threshold=0)
    again.execute("select %s::int", [1])
    out(f"own prepared count query: {[again.execute(COUNT).fetchone()[0] for _ in range(3)]}")

    # Everyone else gone: a fresh client sees nothing.
    for c in (fresh, auto, evict, types, again, other):
        c.close()
    last = psycopg.connect(URL, autocommit=True)
    out(f"fresh client at the end: {count(last)}")
    last.close()
    out("END")


if __name__ == "__main__":
    main()
