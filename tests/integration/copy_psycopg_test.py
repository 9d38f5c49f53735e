#!/usr/bin/python3
"""psycopg 3 through `hyperpool serve`: COPY started with cursor.execute()
(which psycopg refuses with ProgrammingError, leaving the protocol inside
COPY) and then the connection closed must not wedge a pooled origin
connection. Afterwards the pool must be whole: --pool-size N, N concurrent
sessions each complete a transaction within a deadline. Also checks the
operator timeouts and a terminated backend as psycopg sees them.

Needs HYPERPOOL_BINARY and HYPERPOOL_TEST_PG_ENV (ctest sets both).
"""
import os
import subprocess
import sys
import threading
import time

import psycopg

from pgtest_env import append_tempfile, origin_url, read_whole  # beside this script

POOL = 2




def direct():
    return psycopg.connect(origin_url(), autocommit=True)


def start_serve(extra):
    err = append_tempfile()
    proc = subprocess.Popen([os.environ["HYPERPOOL_BINARY"], "serve", "--origin", origin_url(),
                             "--pool-size", str(POOL), "--acquire-timeout", "5000", "--no-cache"] + extra,
                            stdout=subprocess.PIPE, stderr=err, text=True)
    url = proc.stdout.readline().strip()
    if not url.startswith("postgresql://"):
        proc.kill()
        sys.exit("FAIL: no connection string from serve: " + read_whole(err))
    return proc, url, err


def fail(msg, err=None):
    if err is not None:
        msg += "\n--- serve stderr:\n" + read_whole(err)[-4000:]
    sys.exit("FAIL: " + msg)


def pool_is_whole(url, err, n=POOL, deadline=10.0):
    """n sessions, each inside a transaction at the same time: needs n connections."""
    conns = [psycopg.connect(url, connect_timeout=5) for _ in range(n)]
    barrier = threading.Barrier(n, timeout=deadline)
    errors = []

    def work(c):
        try:
            with c.cursor() as cur:
                cur.execute("SELECT 1")  # psycopg opened a transaction: the connection is held
                barrier.wait()
                cur.execute("SELECT 2")
            c.commit()
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(c,)) for c in conns]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(deadline)
    for c in conns:
        c.close()
    if errors or any(t.is_alive() for t in threads):
        fail("pool not whole after {:.1f}s: {}".format(time.monotonic() - start, errors), err)


def copy_cases(url, err):
    with direct() as d:
        d.execute("DROP TABLE IF EXISTS hp_psycopg_copy")
        d.execute("CREATE TABLE hp_psycopg_copy (x int)")
    for sql in ["copy hp_psycopg_copy from stdin", "copy hp_psycopg_copy to stdout",
                "copy (select generate_series(1, 200000)) to stdout"]:
        for autocommit in (True, False):
            start = time.monotonic()
            conn = psycopg.connect(url, autocommit=autocommit, connect_timeout=5)
            try:
                conn.execute(sql)
                fail("psycopg accepted COPY through execute(): " + sql)
            except psycopg.ProgrammingError:
                pass  # "COPY cannot be used with this method; use copy() instead"
            conn.close()
            if time.monotonic() - start > 5:
                fail("closing after {} took {:.1f}s".format(sql, time.monotonic() - start), err)
            pool_is_whole(url, err)
    # The real COPY API still works both ways.
    with psycopg.connect(url, autocommit=True) as c:
        with c.cursor() as cur:
            with cur.copy("COPY hp_psycopg_copy FROM STDIN") as copy:
                for i in range(1000):
                    copy.write_row((i,))
            cur.execute("SELECT count(*) FROM hp_psycopg_copy")
            if cur.fetchone()[0] != 1000:
                fail("copy() wrote the wrong number of rows", err)
            with cur.copy("COPY hp_psycopg_copy TO STDOUT") as copy:
                rows = sum(1 for _ in copy.rows())
            if rows != 1000:
                fail("copy() read {} rows".format(rows), err)
    pool_is_whole(url, err)
    with direct() as d:
        d.execute("DROP TABLE hp_psycopg_copy")


def terminated_backend(url, err):
    conn = psycopg.connect(url, connect_timeout=5)
    pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # inside a transaction
    with direct() as d:
        d.execute("SELECT pg_terminate_backend(%s)", (pid,))
        deadline = time.monotonic() + 10
        while d.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0] != 0:
            if time.monotonic() > deadline:
                fail("backend {} did not go away".format(pid), err)
            time.sleep(0.05)
    try:
        conn.execute("SELECT 1")
        fail("a query on a terminated backend succeeded", err)
    except psycopg.OperationalError as e:
        # Byte for byte what psycopg reports on a direct connection: the
        # origin's FATAL text, then "server closed the connection".
        if "terminating connection due to administrator command" not in str(e) or not conn.broken:
            fail("after termination: {!r} sqlstate={} broken={}".format(e, e.sqlstate, conn.broken), err)
    conn.close()
    pool_is_whole(url, err)


def main():
    proc, url, err = start_serve([])
    try:
        copy_cases(url, err)
        terminated_backend(url, err)
    finally:
        proc.terminate()
        proc.wait(15)
    proc, url, err = start_serve(["--query-timeout", "300", "--idle-in-transaction-timeout", "500"])
    try:
        with psycopg.connect(url, autocommit=True) as c:
            start = time.monotonic()
            try:
                c.execute("SELECT pg_sleep(20)")
                fail("query_timeout did not fire", err)
            except psycopg.errors.QueryCanceled as e:
                if "statement timeout" not in str(e):
                    fail("wrong message: " + str(e), err)
            if time.monotonic() - start > 5:
                fail("query_timeout took too long", err)
            if c.execute("SELECT 3").fetchone()[0] != 3:
                fail("session unusable after query_timeout", err)
        c = psycopg.connect(url, application_name="hp_psycopg_iit")
        c.execute("SELECT 1")  # opens a transaction, then idles in it
        # Poll the origin until that backend is gone (the Endpoint closed it).
        with direct() as d:
            deadline = time.monotonic() + 10
            while d.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'hp_psycopg_iit'"
                            ).fetchone()[0] != 0:
                if time.monotonic() > deadline:
                    fail("the idle-in-transaction backend was not closed", err)
                time.sleep(0.05)
        try:
            c.execute("SELECT 1")
            fail("idle_in_transaction_timeout did not end the session", err)
        except psycopg.OperationalError as e:
            if "terminating connection due to idle-in-transaction timeout" not in str(e):
                fail("idle_in_transaction_timeout: {!r} sqlstate={}".format(e, e.sqlstate), err)
        c.close()
        pool_is_whole(url, err)
    finally:
        proc.terminate()
        proc.wait(15)
    print("ok")


if __name__ == "__main__":
    main()
