#!/usr/bin/python3
"""Row-limited Executes and the query cache, through `hyperpool serve` in
its defaults (cache on) (issue 28, item 6).

- asyncpg's fetchrow sends Execute with a row limit of 1: 40 reads of the
  same primary key reach the origin at most twice once the cache is warm
  (counted by a sequence an IMMUTABLE function bumps per row evaluated;
  directly every read bumps it), with the same rows as directly.
- Raw extended-protocol units with limits below, at and above the row
  count, on results the cache holds and on results it does not: the same
  messages as directly (DataRows, then PortalSuspended when the limit is
  reached, CommandComplete otherwise).

Needs HYPERPOOL_BINARY and HYPERPOOL_TEST_PG_ENV (ctest sets both).
"""
import asyncio
import os
import struct
import sys

import asyncpg
import psycopg

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "adversarial"))
import wire  # noqa: E402
from wire import check  # noqa: E402

ENV = wire.pg_env()
ORIGIN = wire.origin_url(ENV)
READ = "SELECT id, v, lim_count(id) FROM lim_t WHERE id = $1"


def setup():
    with psycopg.connect(ORIGIN, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS lim_t")
        c.execute("DROP SEQUENCE IF EXISTS lim_seq")
        c.execute("CREATE TABLE lim_t (id int PRIMARY KEY, v text)")
        c.execute("INSERT INTO lim_t SELECT g, 'row ' || g FROM generate_series(1, 5) g")
        c.execute("CREATE SEQUENCE lim_seq")
        c.execute("CREATE OR REPLACE FUNCTION lim_count(int) RETURNS int IMMUTABLE LANGUAGE plpgsql AS "
                  "$$BEGIN PERFORM nextval('lim_seq'); RETURN $1; END$$")


def evaluations():
    with psycopg.connect(ORIGIN, autocommit=True) as c:
        last, called = c.execute("SELECT last_value, is_called FROM lim_seq").fetchone()
        return last if called else 0


async def fetchrows(url, key, times):
    conn = await asyncpg.connect(url)
    try:
        return [tuple(await conn.fetchrow(READ, key)) for _ in range(times)]
    finally:
        await conn.close()


async def warm_up(url, key, seconds):
    """Until a connection's second fetchrow is answered without the origin
    (wire.second_read_cached)."""
    return await wire.second_read_cached(url, READ, key, evaluations, seconds)


def test_fetchrow_is_cached(url):
    before = evaluations()
    direct = asyncio.run(fetchrows(ORIGIN, 3, 3))
    check(evaluations() - before == 3, "directly, each fetchrow evaluates the function once")
    check(asyncio.run(warm_up(url, 1, 20)), "fetchrow of id 1 never answered from the cache")
    before = evaluations()
    pooled = asyncio.run(fetchrows(url, 3, 40))
    reached = evaluations() - before
    check(reached <= 2, "40 fetchrows of one key reached the origin %d times (want <= 2)" % reached)
    check(pooled == [direct[0]] * 40, "fetchrow through serve gives the direct row: %r vs %r" % (pooled[:1], direct[:1]))


def unit(sql, param, limit):
    """Parse/Bind/Execute(limit)/Sync of an unnamed statement with one text parameter."""
    p = b"\0" + sql.encode() + b"\0" + struct.pack("!H", 0)
    b = b"\0\0" + struct.pack("!HH", 0, 1) + struct.pack("!i", len(param)) + param.encode() + struct.pack("!H", 0)
    return (wire.frame("P", p) + wire.frame("B", b) + wire.frame("E", b"\0" + struct.pack("!i", limit)) +
            wire.frame("S"))


RANGE = "SELECT id, v FROM lim_t WHERE id <= $1 ORDER BY id"
# (param, limit): misses with limits below, at and above the count, then
# hits (the unlimited and the completed ones are stored) answered truncated.
SEQUENCE = [("4", 2), ("4", 4), ("4", 5), ("4", 4), ("4", 2), ("4", 0), ("4", 1), ("4", 9),
            ("2", 0), ("2", 1), ("2", 2), ("2", 3), ("1", 1), ("1", 1), ("0", 1), ("0", 1)]


def transcript(conn):
    out = []
    for param, limit in SEQUENCE:
        conn.send(unit(RANGE, param, limit))
        msgs = conn.read_until("Z")
        out.append([(t, body if t in "DCsE" else b"") for t, body in msgs])
    return out


def test_limits_as_postgres(serve):
    direct_conn = wire.Conn(ENV["PGHOST"], int(ENV["PGPORT"]))
    direct_conn.login(ENV["ADMIN_USER"], ENV["ADMIN_PASSWORD"], ENV["PGDATABASE"])
    direct = transcript(direct_conn)
    direct_conn.close()
    for round_ in range(2):  # the second round meets every result in the cache
        conn = wire.Conn(serve.host, serve.port)
        conn.login(serve.user, serve.password, serve.database)
        pooled = transcript(conn)
        conn.close()
        for (param, limit), d, p in zip(SEQUENCE, direct, pooled):
            check(p == d, "round %d, param %s limit %d: %r, directly %r" % (
                round_, param, limit, [t for t, _ in p], [t for t, _ in d]))
    check(any(t == "s" for msgs in direct for t, _ in msgs), "the sequence includes suspended portals")


def main():
    setup()
    with wire.Serve(["--pool-size", "2"]) as serve:
        url = "postgresql://%s:%s@%s:%d/%s?sslmode=disable" % (
            serve.user, serve.password, serve.host, serve.port, serve.database)
        def fetchrow_is_cached():
            test_fetchrow_is_cached(url)

        def limits_as_postgres():
            test_limits_as_postgres(serve)

        wire.run([fetchrow_is_cached, limits_as_postgres])


if __name__ == "__main__":
    main()
