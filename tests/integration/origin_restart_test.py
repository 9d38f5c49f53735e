#!/usr/bin/python3
"""The origin restarts under in-flight clients (issue 28, item 7), through
`hyperpool serve` with its defaults (cache on): every client in the middle
of something gets an ErrorResponse (a SQLSTATE), never a bare close. Directly,
PostgreSQL sends FATAL 57P01 on a fast shutdown; after kill -9 of the
postmaster the backends just go, and hyperpool says 08006.

In flight at the restart: clients running `SELECT pg_sleep(30)` (one of them
pinned by a temp table), one inside COPY FROM STDIN, and one waiting in the
pool for a connection. Runs against a PostgreSQL of its own (pgcluster.sh,
a free port), stopped even when the test fails; first `pg_ctl restart -m
fast`, then kill -9 of the postmaster.

Needs HYPERPOOL_BINARY (ctest sets it).
"""
import os
import signal
import subprocess
import tempfile
import threading
import time
import urllib.parse

import psycopg

from pgtest_env import ERR, as_pg, check, fail, read_env  # beside this script

HERE = os.path.dirname(os.path.abspath(__file__))
PGCLUSTER = os.path.join(HERE, "..", "support", "pgcluster.sh")
POOL = 4
RESTARTED = threading.Event()


def server_error(e):
    """Whether libpq read an ErrorResponse before the connection closed.

    A FATAL that ends a query is reported by libpq as the server's message
    followed by "server closed the connection unexpectedly", with no
    SQLSTATE in psycopg even on a direct connection (psycopg 3.1); a bare
    close gives only the latter."""
    text = str(e)
    for prefix in ("consuming input failed: ", "sending query failed: ", "sending query and params failed: "):
        if text.startswith(prefix):
            text = text[len(prefix):]
    return not text.startswith(("server closed the connection unexpectedly", "SSL connection has been closed",
                                "the connection is lost", "connection is closed", "the connection is closed"))


class Client(threading.Thread):
    """Runs fn(conn) on a connection of its own; keeps what it raised."""

    def __init__(self, url, fn):
        super().__init__(daemon=True)
        self.conn = psycopg.connect(url, autocommit=True)
        self.fn = fn
        self.error = None
        self.started_work = threading.Event()

    def run(self):
        try:
            self.fn(self)
        except Exception as e:  # noqa: BLE001 (judged by the test)
            self.error = e


def sleeper(c):
    c.started_work.set()
    c.conn.execute("SELECT pg_sleep(30)")


def quick(c):
    c.started_work.set()
    c.conn.execute("SELECT 1")


def pinned_sleeper(c):
    c.conn.execute("CREATE TEMP TABLE restart_tmp (v int)")
    c.started_work.set()
    c.conn.execute("SELECT pg_sleep(30)")


def copier(c):
    with c.conn.cursor() as cur:
        with cur.copy("COPY restart_copy (v) FROM STDIN") as copy:
            copy.write_row((1,))
            c.started_work.set()
            while not RESTARTED.wait(0.05):  # rows until the origin goes away
                copy.write_row((2,))
            # Rows until writing them fails (the origin backend is gone and
            # hyperpool closed the link), at most 5 s: a CopyDone sent before
            # the backend noticed its postmaster's death could still commit.
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                copy.write_row((3,))
                time.sleep(0.02)
        # (leaving the block ends the COPY: its result reports the loss)


def round_of(url, direct_url, restart, what):
    direct = psycopg.connect(direct_url, autocommit=True)
    direct.execute("DROP TABLE IF EXISTS restart_copy")
    direct.execute("CREATE TABLE restart_copy (v int)")
    clients = [Client(url, pinned_sleeper)] + [Client(url, sleeper) for _ in range(POOL - 1)]
    clients.append(Client(url, copier))
    # The pinned client first: its CREATE TEMP TABLE needs one of the POOL
    # slots until its connection leaves the cap (pinned), so started with
    # the others it could find them all taken (three pg_sleep and the COPY)
    # and wait out the sleep.
    clients[0].start()
    check(clients[0].started_work.wait(20), f"{what}: pinned client started")
    for c in clients[1:]:
        c.start()
    for c in clients:
        check(c.started_work.wait(20), f"{what}: client started")
    # Every pooled connection is busy: one more client waits in the pool.
    waiter = Client(url, quick)
    waiter.start()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        n = direct.execute("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT %%' "
                           "AND state = 'active' AND pid <> pg_backend_pid()").fetchone()[0]
        if n >= POOL:
            break
        time.sleep(0.05)
    check(n >= POOL, f"{what}: {POOL} clients are inside pg_sleep on the origin")
    check(waiter.started_work.wait(20), f"{what}: a client waits in the pool")
    direct.close()
    RESTARTED.clear()
    restart()
    RESTARTED.set()
    for c in clients + [waiter]:
        c.join(40)
    for i, c in enumerate(clients + [waiter]):
        kind = ("pinned", "plain", "plain", "plain", "copy", "waiting")[min(i, 5)]
        e = c.error
        check(not c.is_alive(), f"{what}: {kind} client {i} ended")
        sqlstate = getattr(e, "sqlstate", None)
        if kind == "waiting" and e is None:
            print(f"ok   {what}: the client waiting in the pool was served once the origin was back")
            continue
        check(isinstance(e, psycopg.Error) and (sqlstate is not None or server_error(e)),
              f"{what}: {kind} client {i} got an ErrorResponse ({sqlstate}: {e!r})")
        c.conn.close()


def main():
    base = tempfile.mkdtemp(prefix="hp-restart-")
    proc = None
    try:
        subprocess.run(["bash", PGCLUSTER, "start", base], check=True, stdout=subprocess.DEVNULL, timeout=120)
        env = read_env(os.path.join(base, "env"))
        direct_url = "postgresql://{}:{}@{}:{}/{}?sslmode=disable".format(
            env["ADMIN_USER"], urllib.parse.quote(env["ADMIN_PASSWORD"], safe=""), env["PGHOST"], env["PGPORT"],
            env["PGDATABASE"])
        proc = subprocess.Popen([os.environ["HYPERPOOL_BINARY"], "serve", "--origin", direct_url.replace("disable", "require"), "--pool-size",
                                 str(POOL), "--acquire-timeout", "30000"],
                                stdout=subprocess.PIPE, stderr=ERR, text=True)
        url = proc.stdout.readline().strip()
        if not url.startswith("postgresql://"):
            fail("no connection string from serve")
        pgbin = env["PGBIN"]

        def restart_fast():
            as_pg([os.path.join(pgbin, "pg_ctl"), "restart", "-D", env["PGDATA"], "-m", "fast", "-w", "-t", "60"])

        round_of(url, direct_url, restart_fast, "pg_ctl restart -m fast")
        with psycopg.connect(url, autocommit=True) as c:
            check(c.execute("SELECT 1").fetchone()[0] == 1, "after the restart, a new client is served")

        def kill_postmaster():
            with open(os.path.join(env["PGDATA"], "postmaster.pid")) as f:
                pid = int(f.readline())
            os.kill(pid, signal.SIGKILL)

        round_of(url, direct_url, kill_postmaster, "kill -9 of the postmaster")
        print("PASS")
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        subprocess.run(["bash", PGCLUSTER, "stop", base], timeout=120)


main()
