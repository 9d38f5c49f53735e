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


if __name__ == "__main__":
    wire.run([test_refresh_started_before_a_commit_is_not_stored])
