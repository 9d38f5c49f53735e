#!/usr/bin/python3
"""The query cache judged by PostgreSQL's grammar and the origin's catalog
(issue 25): each class of SQL a token scan misjudged, through `hyperpool
serve` with its defaults (cache on), with the simple protocol (psycopg's
ClientCursor) and the extended one (its default cursor). A class fails when
a result is served from the cache that the origin would have answered
differently.

Needs HYPERPOOL_BINARY and HYPERPOOL_TEST_PG_ENV (ctest sets both).
"""
import os
import subprocess
import sys
import tempfile
import time

import psycopg

from pgtest_env import origin_url  # beside this script


def start_serve():
    err = tempfile.TemporaryFile()
    proc = subprocess.Popen([os.environ["HYPERPOOL_BINARY"], "serve", "--origin", origin_url(),
                             "--pool-size", "4"], stdout=subprocess.PIPE, stderr=err, text=True)
    url = proc.stdout.readline().strip()
    if not url.startswith("postgresql://"):
        proc.kill()
        err.seek(0)
        sys.exit("FAIL: no connection string from serve: " + err.read().decode())
    return proc, url


SETUP = r"""
DROP TABLE IF EXISTS cp_ant, cp_pa, cp_pb, cp_cte, cp_scs_x, cp_scs_y CASCADE;
DROP SEQUENCE IF EXISTS cp_seq;
DROP OPERATOR IF EXISTS #+# (int, int);
CREATE SEQUENCE cp_seq;
CREATE TABLE cp_ant(id int);
INSERT INTO cp_ant VALUES (1);
CREATE OR REPLACE FUNCTION cp_bump(cp_ant) RETURNS bigint VOLATILE LANGUAGE sql AS 'SELECT nextval(''cp_seq'')';
CREATE OR REPLACE FUNCTION zone() RETURNS bigint VOLATILE LANGUAGE sql AS 'SELECT nextval(''cp_seq'')';
CREATE OR REPLACE FUNCTION cp_vadd(int, int) RETURNS bigint VOLATILE LANGUAGE sql
  AS 'SELECT nextval(''cp_seq'') + $1 + $2';
CREATE OPERATOR #+# (LEFTARG = int, RIGHTARG = int, FUNCTION = cp_vadd);
CREATE TABLE cp_pa(id int);
CREATE TABLE cp_pb(id int, v int);
INSERT INTO cp_pa VALUES (1);
INSERT INTO cp_pb VALUES (1, 1);
CREATE TABLE cp_cte(v int);
INSERT INTO cp_cte VALUES (1);
CREATE TABLE cp_scs_x(v int);
CREATE TABLE cp_scs_y(v int);
INSERT INTO cp_scs_x VALUES (100);
INSERT INTO cp_scs_y VALUES (1);
"""

failures = []


def check(name, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + name + (" " + detail if detail else ""))
    if not ok:
        failures.append(name)


def twice_differ(conn, cursor_factory, sql):
    vals = []
    for _ in range(3):
        with cursor_factory(conn) as cur:
            cur.execute(sql)
            vals.append(cur.fetchall())
        time.sleep(0.002)
    return len(set(map(repr, vals))) == 3, vals


def fetch(conn, cursor_factory, sql):
    with cursor_factory(conn) as cur:
        cur.execute(sql)
        return cur.fetchall()


def write_then_read(conn, cursor_factory, read, write, expect):
    fetch(conn, cursor_factory, read)
    fetch(conn, cursor_factory, read)  # cached now, if cacheable
    with cursor_factory(conn) as cur:
        cur.execute(write)
    got = fetch(conn, cursor_factory, read)
    return got == expect, got


def main():
    with psycopg.connect(origin_url(), autocommit=True) as d:
        d.execute(SETUP)
    proc, url = start_serve()
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            # Warm-up: the Endpoint reads the catalog on first need.
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                conn.execute("SELECT id FROM cp_ant").fetchall()
                time.sleep(0.05)
                if time.monotonic() > deadline - 9:
                    break
            for proto, cf in (("simple", psycopg.ClientCursor), ("extended", psycopg.Cursor)):
                ok, v = twice_differ(conn, cf, "SELECT a.cp_bump FROM cp_ant a")
                check(proto + ": volatile function in attribute notation", ok, repr(v))
                ok, v = twice_differ(conn, cf, "SELECT zone() FROM cp_ant")
                check(proto + ": function named like a non-reserved keyword", ok, repr(v))
                ok, v = twice_differ(conn, cf, "SELECT 1 #+# 2 FROM cp_ant")
                check(proto + ": user operator over a volatile function", ok, repr(v))
                ok, v = twice_differ(conn, cf, "SELECT 'now'::timestamptz FROM cp_ant")
                check(proto + ": 'now'::timestamptz", ok, repr(v))
                ok, v = twice_differ(conn, cf, "SELECT timestamptz 'now' FROM cp_ant")
                check(proto + ": timestamptz 'now'", ok, repr(v))
                n = fetch(conn, cf, "SELECT v FROM cp_pb")[0][0] + 1
                ok, v = write_then_read(conn, cf, "SELECT b.v FROM (cp_pa a JOIN (cp_pb b JOIN cp_ant c ON true) "
                                        "ON a.id = b.id)", "UPDATE cp_pb SET v = v + 1", [(n,)])
                check(proto + ": write to a table inside a parenthesized join invalidates", ok, repr(v))
                n = fetch(conn, cf, "SELECT v FROM cp_cte")[0][0] + 1
                ok, v = write_then_read(conn, cf, "WITH cp_cte AS (SELECT v FROM cp_cte) SELECT v FROM cp_cte",
                                        "UPDATE cp_cte SET v = v + 1", [(n,)])
                check(proto + ": CTE named like the table it reads", ok, repr(v))
            # standard_conforming_strings off: with it off the text below
            # reads cp_scs_y ('\' escapes the quote); read as if on, it would
            # read cp_scs_x. A write to cp_scs_y must show.
            with psycopg.connect(url, autocommit=True) as s:
                s.execute("SET standard_conforming_strings = off")
                for proto, cf in (("simple", psycopg.ClientCursor), ("extended", psycopg.Cursor)):
                    read = "SELECT 'a\\' AS s, v FROM cp_scs_x --' , v FROM cp_scs_y"
                    first = fetch(s, cf, read)
                    n = first[0][1] + 1
                    ok, v = write_then_read(s, cf, read, "UPDATE cp_scs_y SET v = v + 1", [(first[0][0], n)])
                    check(proto + ": standard_conforming_strings off", ok, repr(v))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    if failures:
        sys.exit("FAIL: " + ", ".join(failures))
    print("PASS")


if __name__ == "__main__":
    main()
