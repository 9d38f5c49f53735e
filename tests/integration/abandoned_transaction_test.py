#!/usr/bin/python3
"""A client that leaves inside a transaction block (psycopg's default: the
first statement opens one; close() without commit()) through `hyperpool
serve --pool-size 1`: the Endpoint rolls the block back and lends the same
origin connection to the next client (no new origin login), which sees
nothing of the block: no rows it wrote, none of its SET / SET LOCAL, no open
transaction. A failed block ('E') is handled the same way; a block that took
session state which a ROLLBACK does not undo (a temporary table) still
closes the connection.

Needs HYPERPOOL_BINARY and HYPERPOOL_TEST_PG_ENV (ctest sets both).
"""
import os
import subprocess
import sys

import psycopg

from pgtest_env import ERR, check, fail, origin_url  # beside this script






direct = psycopg.connect(origin_url(), autocommit=True)
direct.execute("DROP TABLE IF EXISTS abandoned_t")
direct.execute("CREATE TABLE abandoned_t (v int)")
proc = subprocess.Popen([os.environ["HYPERPOOL_BINARY"], "serve", "--origin", origin_url(), "--pool-size", "1",
                         "--acquire-timeout", "10000", "--no-cache"],
                        stdout=subprocess.PIPE, stderr=ERR, text=True)
try:
    url = proc.stdout.readline().strip()
    if not url.startswith("postgresql://"):
        fail("no connection string from serve")

    def origin_state(pid):
        """The origin backend's state as PostgreSQL reports it, once it is back in the pool."""
        for _ in range(200):  # the rollback runs after the client's socket closed
            row = direct.execute("SELECT state, xact_start IS NULL FROM pg_stat_activity WHERE pid = %s",
                                 (pid,)).fetchone()
            if row is None or row == ("idle", True):
                return row
            direct.execute("SELECT pg_sleep(0.01)")
        return row

    def fresh_session_sees_nothing(pid, what):
        b = psycopg.connect(url, autocommit=True)
        try:
            check(b.execute("SELECT pg_backend_pid()").fetchone()[0] == pid,
                  f"{what}: the next client gets the same origin connection (no new login)")
            check(b.execute("SELECT count(*) FROM abandoned_t").fetchone()[0] == 0,
                  f"{what}: the abandoned block's rows are gone")
            check(b.execute("SHOW statement_timeout").fetchone()[0] == BASELINE[0],
                  f"{what}: its SET LOCAL is gone")
            check(b.execute("SHOW DateStyle").fetchone()[0] == BASELINE[1],
                  f"{what}: its session-level SET inside the block is gone")
            check(b.execute("SELECT txid_current_if_assigned()").fetchone()[0] is None,
                  f"{what}: no transaction is open")
        finally:
            b.close()

    with psycopg.connect(url, autocommit=True) as first:
        BASELINE = (first.execute("SHOW statement_timeout").fetchone()[0],
                    first.execute("SHOW DateStyle").fetchone()[0])
    if BASELINE[0] == "1234s" or BASELINE[1].startswith("German"):
        fail(f"unexpected defaults {BASELINE}")

    # 1. 'T': a write, SET LOCAL and SET, then close without commit.
    a = psycopg.connect(url)
    pid = a.execute("SELECT pg_backend_pid()").fetchone()[0]
    a.execute("INSERT INTO abandoned_t VALUES (1)")
    a.execute("SET LOCAL statement_timeout = '1234s'")
    a.execute("SET DateStyle = 'German'")
    a.close()
    check(origin_state(pid) == ("idle", True), "left in a block: the origin backend is idle, outside a transaction")
    fresh_session_sees_nothing(pid, "left in a block")

    # 2. 'E': a failed block, then close.
    a = psycopg.connect(url)
    check(a.execute("SELECT pg_backend_pid()").fetchone()[0] == pid, "failed block: same origin connection")
    a.execute("INSERT INTO abandoned_t VALUES (2)")
    try:
        a.execute("SELECT 1/0")
        fail("1/0 did not fail")
    except psycopg.errors.DivisionByZero:
        pass
    a.close()
    check(origin_state(pid) == ("idle", True), "left in a failed block: the origin backend is idle")
    fresh_session_sees_nothing(pid, "left in a failed block")

    # 3. A temporary table pins: that connection is closed, not rolled back and shared.
    a = psycopg.connect(url)
    a.execute("CREATE TEMP TABLE abandoned_tmp (v int)")
    a.close()
    b = psycopg.connect(url, autocommit=True)
    try:
        check(b.execute("SELECT pg_backend_pid()").fetchone()[0] != pid,
              "left with a temporary table: the next client gets a new origin connection")
        check(b.execute("SELECT to_regclass('pg_temp.abandoned_tmp')").fetchone()[0] is None,
              "left with a temporary table: the next client does not see it")
    finally:
        b.close()
    print("PASS")
finally:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
    direct.execute("DROP TABLE IF EXISTS abandoned_t")
    direct.close()
