#!/usr/bin/python3
"""A result read before a commit is never stored after it.

A unit that must reach the origin although its key is cached (it holds a
named Parse: the origin must see it) refreshes the entry with its result.
If a write through the pooler commits while that unit runs, the unit's
rows are from before the commit (its snapshot was taken earlier), and the
commit's invalidation has already dropped the entry: storing the refresh
after it put the old rows back, and every app that read after the write
was acknowledged got them (found with 24 psycopg readers, prepared and
not, a writer and DDL over `serve` with its defaults: "reader saw 15 <
16", once in three 25 s runs).

Made certain here: the reader's statement waits inside the origin on an
advisory lock the test holds (its function is declared IMMUTABLE, so the
pooler caches it) while the write commits, then finishes with the old
row. Wanted, as directly: a read that starts after the write was
acknowledged sees the new row.

The same unit, when another session is fetching its key, registered as
that fetch's follower and then went to the origin anyway, leaving its
waiter behind: when that fetch completed, the session's next wait (on
another key) was answered with the first key's rows (postgres.js with
prepare: false, whose describe-first Bind is such a unit: "id 2 saw the
row of id 1", under DDL from another connection). Made certain with two
gated statements, each waiting on its own advisory lock at its first
evaluation only.

Needs HYPERPOOL_BINARY and HYPERPOOL_TEST_PG_ENV (ctest sets both).
"""
import os
import struct
import sys

import psycopg

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "adversarial"))
import wire  # noqa: E402
from wire import check  # noqa: E402

ENV = wire.pg_env()
ORIGIN = wire.origin_url(ENV)
TABLE = "refresh_race"
LOCK_KEY = 7317


def direct(*statements):
    with psycopg.connect(ORIGIN, autocommit=True) as c:
        for s in statements:
            c.execute(s)


def evaluations():
    with psycopg.connect(ORIGIN, autocommit=True) as c:
        return c.execute("SELECT last_value, is_called FROM %s_seq" % TABLE).fetchone()


def first_value(msgs):
    """The first column of the unit's one DataRow (a ready Conn's answers)."""
    rows = [payload for tag, payload in msgs if tag == "D"]
    errors = [wire.error_fields(payload) for tag, payload in msgs if tag == "E"]
    check(not errors, "the origin answered with an error: %r" % errors)
    check(len(rows) == 1, "one row wanted, got %r" % msgs)
    payload = rows[0]
    (length,) = struct.unpack("!i", payload[2:6])
    return payload[6:6 + length].decode()


def connect(serve):
    conn = wire.Conn(serve.host, serve.port)
    conn.login(serve.user, serve.password, serve.database)
    return conn


def test_refresh_started_before_a_commit_is_not_stored():
    direct("DROP TABLE IF EXISTS %s" % TABLE,
           "DROP SEQUENCE IF EXISTS %s_seq" % TABLE,
           "CREATE TABLE %s (id int PRIMARY KEY, v int)" % TABLE,
           "INSERT INTO %s VALUES (1, 1)" % TABLE,
           "CREATE SEQUENCE %s_seq" % TABLE,
           # Declared IMMUTABLE (so cacheable); counts its evaluations and
           # waits while the test holds the advisory lock.
           "CREATE OR REPLACE FUNCTION %s_gate(int) RETURNS int IMMUTABLE LANGUAGE plpgsql AS "
           "$$BEGIN PERFORM nextval('%s_seq'); PERFORM pg_advisory_lock_shared(%d); "
           "PERFORM pg_advisory_unlock_shared(%d); RETURN $1; END$$" % (TABLE, TABLE, LOCK_KEY, LOCK_KEY))
    sql = "SELECT v, %s_gate(id) FROM %s WHERE id = 1" % (TABLE, TABLE)
    with wire.Serve() as serve:
        # Until a second read is answered from the cache (the catalog is
        # read on first use): the key of an unnamed statement's unit is
        # then cached, the key the reader's refresh stores under.
        unnamed = wire.parse("", sql) + wire.bind("") + wire.describe_portal() + wire.execute() + wire.sync()

        def cached():
            conn = connect(serve)
            try:
                conn.send(unnamed)
                check(first_value(conn.read_until("Z")) == "1", "the row before the write")
                before = evaluations()
                conn.send(unnamed)
                check(first_value(conn.read_until("Z")) == "1", "the row before the write")
                return evaluations() == before
            finally:
                conn.close()
        check(wire.wait_until(cached, 20, step=0.1), "the pooler never answered a read from its cache")

        with psycopg.connect(ORIGIN, autocommit=True) as gate:
            gate.execute("SELECT pg_advisory_lock(%d)" % LOCK_KEY)
            reader = connect(serve)
            # A named Parse in the unit: it reaches the origin although its
            # key is cached (a hit), and refreshes the entry with what it
            # reads.
            reader.send(wire.parse("s1", sql) + wire.bind("s1") + wire.describe_portal() + wire.execute() + wire.sync())

            def reader_waits():
                return gate.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND wait_event = 'advisory' AND query LIKE %s", ("%%%s_gate%%" % TABLE,)).fetchone()[0] == 1
            check(wire.wait_until(reader_waits, 20), "the reader's statement never reached the origin's lock")
            # The reader's snapshot is taken: a write commits meanwhile,
            # through the pooler, and is acknowledged.
            with psycopg.connect("host=%s port=%d dbname=%s user=%s password=%s sslmode=disable" %
                                 (serve.host, serve.port, serve.database, serve.user, serve.password),
                                 autocommit=True) as writer:
                writer.execute("UPDATE %s SET v = 2 WHERE id = 1" % TABLE)
            gate.execute("SELECT pg_advisory_unlock(%d)" % LOCK_KEY)
            check(first_value(reader.read_until("Z")) == "1", "the reader's row, as of its snapshot")
            reader.close()

        # Every read that starts after the write was acknowledged sees it:
        # an unnamed statement's unit (the key the refresh was stored
        # under), a named statement's Bind (its Parse, alone before a Sync,
        # is answered without the origin) and a simple Query.
        later = connect(serve)
        try:
            later.send(unnamed)
            check(first_value(later.read_until("Z")) == "2", "an unnamed statement after the commit read the row before it")
            later.send(wire.parse("s2", sql) + wire.sync())
            later.read_until("Z")
            later.send(wire.bind("s2") + wire.describe_portal() + wire.execute() + wire.sync())
            check(first_value(later.read_until("Z")) == "2",
                  "a named statement's Bind after the commit read the row before it")
            later.send(wire.query(sql))
            check(first_value(later.read_until("Z")) == "2", "a Query after the commit read the row before it")
        finally:
            later.close()
    direct("DROP TABLE IF EXISTS %s" % TABLE, "DROP FUNCTION IF EXISTS %s_gate(int)" % TABLE,
           "DROP SEQUENCE IF EXISTS %s_seq" % TABLE)


def advisory_waiters(conn, text):
    """Backends waiting on an advisory lock in a statement that holds `text`
    (other tests share the fixture's server)."""
    return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND wait_event = 'advisory' AND query LIKE %s", ("%%%s%%" % text,)).fetchone()[0]


def coalesced(serve):
    """The Endpoint tier's follower waits so far (the metrics endpoint)."""
    import urllib.request
    with urllib.request.urlopen("http://%s/metrics" % serve.metrics, timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("hyperpool_cache_coalesced_total") and 'tier="endpoint"' in line:
                return int(float(line.split()[-1]))
    return 0


def test_a_refresh_leaves_no_waiter_behind():
    t = TABLE + "_w"
    direct("DROP TABLE IF EXISTS %s" % t,
           "CREATE TABLE %s (id int PRIMARY KEY, v int)" % t,
           "INSERT INTO %s VALUES (1, 10), (2, 20), (3, 30)" % t,
           "DROP SEQUENCE IF EXISTS %s_s1, %s_s2, %s_s3" % (t, t, t),
           "CREATE SEQUENCE %s_s1" % t, "CREATE SEQUENCE %s_s2" % t, "CREATE SEQUENCE %s_s3" % t,
           # IMMUTABLE as declared (cacheable); its first evaluation after
           # the sequence is reset waits while the test holds `lock`.
           "CREATE OR REPLACE FUNCTION %s_gate(k int, lock int, seq text) RETURNS int IMMUTABLE "
           "LANGUAGE plpgsql AS $$BEGIN IF nextval(seq::regclass) = 1 THEN "
           "PERFORM pg_advisory_lock_shared(lock); PERFORM pg_advisory_unlock_shared(lock); END IF; "
           "RETURN k; END$$" % t)

    def sql(i):
        return "SELECT v, %s_gate(id, %d, '%s_s%d') FROM %s WHERE id = %d" % (t, LOCK_KEY + i, t, i, t, i)

    def unit(name, i):
        return wire.parse(name, sql(i)) + wire.bind(name) + wire.describe_portal() + wire.execute() + wire.sync()

    with wire.Serve(["--metrics-listen", "127.0.0.1:0"]) as serve:
        at = wire.wait_until(lambda: "metrics on http://" in serve.stderr_text(), 20)
        check(at, "serve logged no metrics address")
        serve.metrics = serve.stderr_text().split("metrics on http://", 1)[1].split("/metrics")[0]
        warm = connect(serve)
        try:
            # Until a read of a third key is answered from the cache (the
            # catalog is read on first use), and the statements' result
            # types are known.
            def cached():
                warm.send(unit("", 3))
                first_value(warm.read_until("Z"))
                before = evaluations_of(t, 3)
                warm.send(unit("", 3))
                first_value(warm.read_until("Z"))
                return evaluations_of(t, 3) == before
            check(wire.wait_until(cached, 20, step=0.1), "the pooler never answered a read from its cache")
            for i in (1, 2):
                warm.send(unit("", i))
                first_value(warm.read_until("Z"))
        finally:
            warm.close()
        a, b, c = connect(serve), connect(serve), connect(serve)
        with psycopg.connect(ORIGIN, autocommit=True) as gate:
            gate.execute("SELECT pg_advisory_lock(%d), pg_advisory_lock(%d)" % (LOCK_KEY + 1, LOCK_KEY + 2))
            direct("SELECT setval('%s_s1', 1, false), setval('%s_s2', 1, false)" % (t, t))
            # The warm-up's entries of keys 1 and 2 dropped: a write through
            # the pooler.
            w = connect(serve)
            w.send(wire.query("UPDATE %s SET v = v WHERE id IN (1, 2)" % t))
            w.read_until("Z")
            w.close()
            # A leads the fetch of key 1; it waits at the origin.
            a.send(unit("", 1))
            check(wire.wait_until(lambda: advisory_waiters(gate, t + "_gate") == 1, 20), "A never reached the lock")
            # B's unit of key 1 holds a named Parse: it goes to the origin
            # although A is fetching the key (its evaluation is not the first:
            # it does not wait).
            b.send(unit("s1", 1))
            check(first_value(b.read_until("Z")) == "10", "B's row of id 1")
            # C leads the fetch of key 2; B waits for it as a follower.
            c.send(unit("", 2))
            check(wire.wait_until(lambda: advisory_waiters(gate, t + "_gate") == 2, 20), "C never reached the lock")
            before = coalesced(serve)
            b.send(unit("", 2))
            check(wire.wait_until(lambda: coalesced(serve) > before, 20), "B never waited for C's fetch")
            # A's fetch completes first: B's wait on key 2 is not its business.
            gate.execute("SELECT pg_advisory_unlock(%d)" % (LOCK_KEY + 1))
            check(first_value(a.read_until("Z")) == "10", "A's row of id 1")
            gate.execute("SELECT pg_advisory_unlock(%d)" % (LOCK_KEY + 2))
            check(first_value(c.read_until("Z")) == "20", "C's row of id 2")
            check(first_value(b.read_until("Z")) == "20", "B's unit of id 2 was answered with another key's rows")
        for conn in (a, b, c):
            conn.close()
    direct("DROP TABLE IF EXISTS %s" % t, "DROP FUNCTION IF EXISTS %s_gate(int, int, text)" % t,
           "DROP SEQUENCE IF EXISTS %s_s1, %s_s2, %s_s3" % (t, t, t))


def evaluations_of(t, i):
    with psycopg.connect(ORIGIN, autocommit=True) as c:
        return c.execute("SELECT last_value, is_called FROM %s_s%d" % (t, i)).fetchone()


if __name__ == "__main__":
    wire.run([test_refresh_started_before_a_commit_is_not_stored, test_a_refresh_leaves_no_waiter_behind])
