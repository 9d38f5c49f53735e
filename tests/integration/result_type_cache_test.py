#!/usr/bin/python3
"""A cached result never reaches a driver that holds another result type
for its statement.

asyncpg prepares `SELECT * FROM t WHERE id = $1` and then runs it as
Bind + Execute + Sync of its named statement, decoding the rows with the
RowDescription it was shown when it prepared. DDL made on the origin
directly (which hyperpool does not see) changes that statement's result
type. A direct connection then fails the old statement with 0A000 "cached
plan must not change result type" and asyncpg prepares it again. Through
hyperpool the cache was keyed by the statement's text and parameters only:
a result one connection stored after preparing the new shape was handed to
a connection that still held the old one, and asyncpg failed with "the
number of columns in the result row (3) is different from what was
described (2)" (CI's driver suite, `ddl_check`, when a catalog read split
one text into two server statements).

Here made certain: connection A prepares; DDL through the pooler (another
table) moves the schema epoch, so B's Parse of the same text gets a server
statement of its own; a column is added on the origin directly; a write
through the pooler invalidates the table's entries; B's next read fails at
the origin (0A000), B prepares again and stores the new shape. A's
statement was never failed: its reads must not get B's rows. Wanted: no
driver error; every row either the current one or, from the cache within
its max age, the one before the DDL (the documented staleness of writes
that bypass hyperpool when the WAL feed is off).

Checked in both deployments with the cache on:
- `serve` (one process: the Endpoint tier answers);
- `endpoint` + `client` over TLS (the Client tier answers first).

Needs HYPERPOOL_BINARY and HYPERPOOL_TEST_PG_ENV (ctest sets both).
"""
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile

import asyncpg
import psycopg

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(HERE, "..", "adversarial"))
import wire  # noqa: E402
from wire import check  # noqa: E402

ENV = wire.pg_env()
ORIGIN = wire.origin_url(ENV)


def direct(*statements):
    with psycopg.connect(ORIGIN, autocommit=True) as c:
        for s in statements:
            c.execute(s)


async def read_all(conns, sql, label, errors):
    rows = []
    for i, c in enumerate(conns):
        try:
            rows.append(tuple(await c.fetchrow(sql, 1)))
        except Exception as e:  # noqa: BLE001 - every driver error is the finding
            errors.append("%s, connection %d: %s: %s" % (label, i, type(e).__name__, e))
            rows.append(None)
    return rows


async def catalog_loaded(url, table, seconds=20):
    """Until a fresh connection's second read of another table is answered
    from the cache: the pooler has read the catalog (the test's table, made
    before, included), so the test's own reads are cacheable from the
    first."""
    helper = table + "_w"
    direct("DROP TABLE IF EXISTS %s" % helper,
           "DROP SEQUENCE IF EXISTS %s_seq" % helper,
           "CREATE TABLE %s (id int PRIMARY KEY)" % helper,
           "INSERT INTO %s VALUES (1)" % helper,
           "CREATE SEQUENCE %s_seq" % helper,
           "CREATE OR REPLACE FUNCTION %s_count(int) RETURNS int IMMUTABLE LANGUAGE plpgsql AS "
           "$$BEGIN PERFORM nextval('%s_seq'); RETURN $1; END$$" % (helper, helper))
    sql = "SELECT %s_count(id) FROM %s WHERE id = $1" % (helper, helper)

    def evaluations():
        with psycopg.connect(ORIGIN, autocommit=True) as c:
            return c.execute("SELECT last_value, is_called FROM %s_seq" % helper).fetchone()

    return await wire.second_read_cached(url, sql, 1, evaluations, seconds)


async def scenario(url, table):
    sql = "SELECT * FROM %s WHERE id = $1" % table
    direct("DROP TABLE IF EXISTS %s" % table,
           "CREATE TABLE %s (id int PRIMARY KEY, a int NOT NULL)" % table,
           "INSERT INTO %s VALUES (1, 10)" % table)
    check(await catalog_loaded(url, table), "the pooler never answered a read from its cache")
    errors = []
    a = await asyncpg.connect(url)
    b = await asyncpg.connect(url)
    try:
        # A prepares the statement, then DDL through the pooler (another
        # table) moves its schema epoch, so B's Parse of the same text gets
        # a server statement of its own: two statements, one cache key.
        rows = await read_all([a, a], sql, "A before", errors)
        await b.execute("CREATE TABLE IF NOT EXISTS %s_epoch (x int)" % table)
        rows += await read_all([b, b], sql, "B before", errors)
        check(rows == [(1, 10)] * 4, "before the DDL: %r" % rows)
        # A column added on the origin directly, then a write through the
        # pooler: the table's entries are invalidated, so B's next read
        # reaches the origin, which fails B's statement (0A000); asyncpg
        # prepares it again and its read stores the new shape.
        direct("ALTER TABLE %s ADD COLUMN b int NOT NULL DEFAULT 7" % table)
        await b.execute("UPDATE %s SET a = a WHERE id = 1" % table)
        rows = await read_all([b], sql, "B after", errors)
        check(rows in ([(1, 10, 7)], [None]), "B after the DDL: %r" % rows)
        # A's statement was never failed at the origin: its Bind must not
        # be handed B's rows (3 columns for A's 2-column description).
        for round_ in range(2):
            rows = await read_all([a, b], sql, "round %d" % round_, errors)
            check(all(r in (None, (1, 10), (1, 10, 7)) for r in rows), "round %d: %r" % (round_, rows))
        check(not errors, "driver errors a direct connection never gives: %s" % "; ".join(errors))
    finally:
        await a.close(timeout=5)
        await b.close(timeout=5)
        direct("DROP TABLE IF EXISTS %s_epoch" % table)


def url_of(user, password, host, port, database):
    return "postgresql://%s:%s@%s:%d/%s?sslmode=disable" % (user, password, host, port, database)


def test_serve():
    table = "rtc_serve"
    with wire.Serve(["--pool-size", "2"]) as serve:
        try:
            asyncio.run(scenario(url_of(serve.user, serve.password, serve.host, serve.port, serve.database),
                                 table))
        except Exception:
            print(serve.stderr_text()[-6000:])
            raise


class Split:
    """`hyperpool endpoint --no-cache` and `hyperpool client` joined over TLS."""

    def __enter__(self):
        self.tmp = tempfile.mkdtemp(prefix="hp-rtc-")
        self.procs = []
        binary = os.environ["HYPERPOOL_BINARY"]
        subprocess.run(["bash", os.path.join(ROOT, "tests", "support", "gencerts.sh"), self.tmp + "/certs"],
                       check=True, stdout=subprocess.DEVNULL)
        secret = os.path.join(self.tmp, "secret")
        with open(secret, "w") as f:
            f.write(os.urandom(32).hex() + "\n")
        os.chmod(secret, 0o600)
        self.ep_err = open(os.path.join(self.tmp, "ep.err"), "ab")
        ep = subprocess.Popen([binary, "endpoint", "--listen", "127.0.0.1:0", "--origin", ORIGIN,
                               "--tls-cert", self.tmp + "/certs/server.crt", "--tls-key",
                               self.tmp + "/certs/server.key", "--link-secret-file", secret,
                               "--pool-size", "2"],
                              stdout=subprocess.PIPE, stderr=self.ep_err)
        self.procs.append(ep)
        addr = ep.stdout.readline().decode().strip()
        check(addr, "the endpoint printed no address")
        self.cl_err = open(os.path.join(self.tmp, "cl.err"), "ab")
        self.password = "rtc-" + os.urandom(8).hex()
        cl = subprocess.Popen([binary, "client", "--endpoint", addr, "--tls-ca", self.tmp + "/certs/ca.crt",
                               "--link-secret-file", secret, "--user", "app", "--password", self.password,
                               "--database", "appdb", "--threads", "1"],
                              stdout=subprocess.PIPE, stderr=self.cl_err)
        self.procs.append(cl)
        self.url = cl.stdout.readline().decode().strip()
        check(self.url.startswith("postgresql://"), "the client printed %r" % self.url)
        return self

    def logs(self):
        out = []
        for name in ("ep.err", "cl.err"):
            with open(os.path.join(self.tmp, name), "rb") as f:
                out.append("--- %s\n%s" % (name, f.read().decode(errors="replace")[-4000:]))
        return "\n".join(out)

    def __exit__(self, *exc):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.ep_err.close()
        self.cl_err.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        return False


def test_client_tier():
    table = "rtc_client"
    with Split() as split:
        try:
            asyncio.run(scenario(split.url, table))
        except Exception:
            print(split.logs())
            raise


def main():
    wire.run([test_serve, test_client_tier])


if __name__ == "__main__":
    main()
