#!/usr/bin/python3
"""pg_terminate_backend / pg_cancel_backend with the pid a driver holds
(issue 28, item 5), psycopg through `hyperpool serve` with its defaults
(cache on), as psycopg's test_context_inerror_rollback_no_clobber does:

- a connection that has only logged in (no link to the Endpoint yet):
  terminating it answers t and ends it with 57P01, cancelling it answers t;

- conn A's pid from BackendKeyData (conn.info.backend_pid); conn B runs
  `select pg_terminate_backend(%s::int)` (extended protocol, a parameter)
  and gets t; A's next query fails with FATAL 57P01 and its connection is
  closed; the same with a constant in a simple Query, and with the timeout
  argument;
- pg_cancel_backend(A's pid) cancels A's running query (57014) and A goes on;
- node-postgres (tests/drivers/terminate_pg.mjs, as its gh-issues/130): the
  terminated pooled client's error event, and the pool recovers; a named
  statement terminates the client it names also when bound alone (its
  second execution);
- from another database of the same `serve` (a "*" entry: one Endpoint per
  database), and with the origin pid a client read from pg_backend_pid(),
  as node-postgres's gh-issues/130 does (from template1);
- a pid hyperpool hands out is above 2^22, so it is never a real backend's,
  and a real origin pid (from pg_backend_pid()) still reaches the origin;
- asyncpg, as its suite's test_pool_remote_close: a pool connection reads
  pg_backend_pid(); another connection runs
  `execute('SELECT pg_terminate_backend($1)', pid)`, which asyncpg prepares
  (Parse + Describe + Sync) and binds in a later batch: the caller gets
  SELECT 1 (not its own backend ended), the pool connection is ended, and
  the pool recovers;
- the origin pid a session read from pg_backend_pid(), terminated by a
  session that the pool has lent that backend since: the session that read
  it is ended, the caller goes on, as directly.

Needs HYPERPOOL_BINARY and HYPERPOOL_TEST_PG_ENV (ctest sets both).
"""
import asyncio
import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

import asyncpg
import psycopg

from pgtest_env import ERR, check, env_get, fail, origin_url  # beside this script



def run_in_thread(conn, sql):
    """Runs sql on conn in a thread; returns it and the list its error goes to."""
    errors = []

    def run():
        try:
            conn.execute(sql)
        except Exception as e:  # noqa: BLE001 (judged by the caller)
            errors.append(e)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, errors


async def asyncpg_terminate(url, origin_pid):
    """A second connection terminates `origin_pid` as asyncpg's test does."""
    killer = await asyncpg.connect(url)
    try:
        status = await killer.execute("SELECT pg_terminate_backend($1)", origin_pid)
        check(status == "SELECT 1", f"asyncpg: pg_terminate_backend($1), bound after its prepare, answers {status}")
        check(await killer.fetchval("SELECT 5") == 5, "asyncpg: the terminating connection goes on")
    finally:
        await killer.close()


async def asyncpg_remote_close(url):
    """asyncpg's test_pool_remote_close, with bounded waits."""
    victim = await asyncpg.connect(url)
    await asyncpg_terminate(url, await victim.fetchval("SELECT pg_backend_pid()"))
    deadline = time.monotonic() + 10
    while not victim.is_closed() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    check(victim.is_closed(), "asyncpg: the connection that read the pid is ended")
    # The pool's way: the pool's connection is lost, and the pool recovers.
    pool = await asyncpg.create_pool(url, min_size=1, max_size=1)
    try:
        async with pool.acquire() as pooled:
            await asyncpg_terminate(url, await pooled.fetchval("SELECT pg_backend_pid()"))
        conn = await pool.acquire(timeout=10)
        try:
            check(await conn.fetchval("SELECT 6") == 6, "asyncpg: the pool recovers")
        finally:
            await pool.release(conn)
    finally:
        await pool.close()


def stop(served):
    served.terminate()
    try:
        served.wait(10)
    except subprocess.TimeoutExpired:
        served.kill()


def terminated(conn, what):
    try:
        conn.execute("SELECT 1")
        fail(f"{what}: the terminated connection still answers")
    except psycopg.OperationalError as e:
        check(e.sqlstate == "57P01" or "terminating connection due to administrator command" in str(e),
              f"{what}: its next query fails with FATAL 57P01 ({e.sqlstate}: {str(e).splitlines()[0]})")
    check(conn.closed or conn.broken, f"{what}: its connection is closed")


def serve(pool_size):
    """`serve` with its defaults but the pool size: the process and its connection string."""
    served = subprocess.Popen([os.environ["HYPERPOOL_BINARY"], "serve", "--origin", origin_url(),
                               "--pool-size", str(pool_size)], stdout=subprocess.PIPE, stderr=ERR, text=True)
    served_url = served.stdout.readline().strip()
    if not served_url.startswith("postgresql://"):
        stop(served)
        fail(f"no connection string from serve --pool-size {pool_size}")
    return served, served_url


proc, url = serve(2)
try:
    b = psycopg.connect(url, autocommit=True)

    # 0. A has only logged in: nothing of it reached the Endpoint yet (no
    # link), as a pool's fresh connection. Terminating it answers t and
    # ends it; cancelling it answers t and it goes on, as directly.
    a = psycopg.connect(url, autocommit=True)
    check(b.execute("select pg_terminate_backend(%s::int)", [a.info.backend_pid]).fetchone() == (True,),
          "pg_terminate_backend of a session that only logged in answers t")
    terminated(a, "a session that only logged in")
    a = psycopg.connect(url, autocommit=True)
    check(b.execute("select pg_cancel_backend(%s::int)", [a.info.backend_pid]).fetchone() == (True,),
          "pg_cancel_backend of a session that only logged in answers t")
    check(a.execute("SELECT 7").fetchone()[0] == 7, "...and it goes on")
    a.close()

    # 1. psycopg's way: a parameter (extended protocol), A idle in a block.
    a = psycopg.connect(url)
    a.execute("SELECT 1")  # A is inside a transaction block now
    pid = a.info.backend_pid
    check(pid >= 1 << 22, f"the pid hyperpool hands out ({pid}) is above 2^22: never a real backend pid")
    check(b.execute("select pg_terminate_backend(%s::int)", [pid]).fetchone() == (True,),
          "pg_terminate_backend(%s::int) with A's pid answers t")
    terminated(a, "extended protocol")

    # 2. A constant in a simple Query, A busy in pg_sleep; and with a timeout.
    for sql in ("SELECT pg_terminate_backend({})", "select pg_catalog.pg_terminate_backend({}, 5000);"):
        a = psycopg.connect(url, autocommit=True)
        pid = a.info.backend_pid
        t, errors = run_in_thread(a, "SELECT pg_sleep(20)")
        time.sleep(0.2)  # (not needed for correctness: terminating an idle A is checked as well below)
        check(b.execute(sql.format(pid)).fetchone()[0] is True, f"{sql.format('pid')} answers t")
        t.join(15)
        check(not t.is_alive(), f"{sql.format('pid')}: A's running query ends")
        if errors:
            e = errors[0]
            check(isinstance(e, psycopg.OperationalError) and
                  (e.sqlstate == "57P01" or "terminating connection due to administrator command" in str(e)),
                  f"...with FATAL 57P01 ({e!r})")
        else:
            terminated(a, sql.format("pid"))

    # 3. pg_cancel_backend cancels A's running query; A goes on.
    a = psycopg.connect(url, autocommit=True)
    pid = a.info.backend_pid
    t, errors = run_in_thread(a, "SELECT pg_sleep(20)")
    deadline = time.monotonic() + 15
    answers = set()
    while t.is_alive() and time.monotonic() < deadline:
        answers.add(b.execute("select pg_cancel_backend(%s)", [pid]).fetchone()[0])
        t.join(0.2)  # (again until it reaches the running query)
    # (t and nothing cancelled while A's first query has not reached
    # hyperpool's Endpoint yet: the Client holds the pid, nothing runs)
    check(True in answers, f"pg_cancel_backend(A's pid) answers t ({answers})")
    check(not t.is_alive() and errors and isinstance(errors[0], psycopg.errors.QueryCanceled),
          f"A's running query is cancelled with 57014 ({errors!r})")
    check(a.execute("SELECT 2").fetchone()[0] == 2, "A goes on after the cancel")
    a.close()

    # 4. A real origin pid goes to the origin unchanged.
    direct = psycopg.connect(origin_url(), autocommit=True)
    real = direct.info.backend_pid
    check(b.execute("select pg_terminate_backend(%s)", [real]).fetchone() == (True,),
          "an origin pid (a direct connection's) reaches the origin")
    terminated(direct, "a direct connection terminated through hyperpool")
    check(b.execute("SELECT 3").fetchone()[0] == 3, "the terminating client goes on")
    b.close()

    # 5. node-postgres (gh-issues/130-like): a pooled client terminated from
    # another client; the pool gets its error event (57P01) and recovers.
    node = subprocess.run(["node", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "drivers",
                                                "terminate_pg.mjs"), url],
                          capture_output=True, text=True, timeout=60)
    check(node.returncode == 0, f"node-postgres: terminated clients get 57P01, the pool recovers ({node.stdout.strip()} "
                                f"{node.stderr.strip()[-500:]})")

    # 6b. asyncpg: the statement prepared in one batch, bound in the next.
    asyncio.run(asyncio.wait_for(asyncpg_remote_close(url), 60))
finally:
    stop(proc)


def serve_with_any_database():
    """serve with hp's database and a "*" entry: one Endpoint per database."""
    tmp = tempfile.mkdtemp(prefix="hp-pid-")
    atexit.register(shutil.rmtree, tmp, True)
    pw_file = os.path.join(tmp, "origin-pw")
    with open(pw_file, "w") as f:
        f.write(env_get("ADMIN_PASSWORD") + "\n")
    os.chmod(pw_file, 0o600)
    origin = "postgresql://%s@%s:%s/%%s?sslmode=disable" % (env_get("ADMIN_USER"), env_get("PGHOST"), env_get("PGPORT"))
    db = env_get("PGDATABASE")
    config = os.path.join(tmp, "hp.toml")
    with open(config, "w") as f:
        f.write('[client]\nuser = "app"\npassword = "app-pw"\ndatabase = "%s"\n' % db)
        f.write('[databases.%s]\nurl = "%s"\npassword_file = "%s"\npool_size = 2\n' % (db, origin % db, pw_file))
        f.write('[databases."*"]\nurl = "%s"\npassword_file = "%s"\npool_size = 2\n' % (origin % "postgres", pw_file))
    os.chmod(config, 0o600)
    served = subprocess.Popen([os.environ["HYPERPOOL_BINARY"], "serve", "--config", config],
                              stdout=subprocess.PIPE, stderr=ERR, text=True)
    port = urllib.parse.urlparse(served.stdout.readline().strip()).port
    if port is None:
        fail("no connection string from serve --config")
    return served, "host=127.0.0.1 port=%d user=app password=app-pw sslmode=disable dbname=" % port, db


# 6. From another database of the same serve (node-postgres's gh-issues/130
# runs psql on template1 with the pid of a pool client on its own database).
proc, dsn, db = serve_with_any_database()
try:
    other = psycopg.connect(dsn + "template1", autocommit=True)
    a = psycopg.connect(dsn + db, autocommit=True)
    pid = a.info.backend_pid
    t, errors = run_in_thread(a, "SELECT pg_sleep(20)")
    deadline = time.monotonic() + 15
    answers = set()
    while t.is_alive() and time.monotonic() < deadline:
        answers.add(other.execute("SELECT pg_cancel_backend(%d)" % pid).fetchone()[0])
        t.join(0.2)
    check(True in answers and errors and isinstance(errors[0], psycopg.errors.QueryCanceled),
          f"pg_cancel_backend from template1 cancels A's query on {db} with 57014 ({answers}, {errors!r})")
    check(a.execute("SELECT 2").fetchone()[0] == 2, "A goes on after the cancel")
    check(other.execute("SELECT pg_terminate_backend(%d)" % pid).fetchone()[0] is True,
          "pg_terminate_backend from template1 with A's pid answers t")
    terminated(a, "terminated from another database")
    check(other.execute("SELECT current_database()").fetchone()[0] == "template1", "the terminating client goes on")
    # The pid of pg_backend_pid() (an origin backend's, gh-issues/130's way):
    # the session that ran its latest unit there is the one ended, as
    # directly the session whose backend it is, also once the backend is
    # back in the pool.
    for where in (db, "template1"):
        a = psycopg.connect(dsn + db, autocommit=True)
        origin_pid = a.execute("SELECT pg_backend_pid()").fetchone()[0]
        killer = psycopg.connect(dsn + where, autocommit=True)
        check(killer.execute("SELECT pg_terminate_backend(%d)" % origin_pid).fetchone()[0] is True,
              f"pg_terminate_backend(pg_backend_pid() of A) from {where} answers t")
        terminated(a, f"A, by the origin pid it read, from {where}")
        check(killer.execute("SELECT 4").fetchone()[0] == 4, "the terminating client goes on")
        killer.close()
    other.close()
finally:
    stop(proc)

# 7. The origin pid a session was shown, after the pool lent that backend to
# the caller: a reads pg_backend_pid(), b runs a statement (one origin
# connection: b is lent a's backend), then b terminates a's pid. Directly a
# ends and b goes on; the session shown the pid is the one ended, not the
# caller that used the backend since (before: b's own backend, b ended),
# also when b was shown that pid itself since (directly it never is).
proc, url = serve(1)
try:
    b = psycopg.connect(url, autocommit=True)
    for how, sql, b_reads in (("a parameter", "select pg_terminate_backend(%s)", False),
                              ("a constant", "SELECT pg_terminate_backend({})", False),
                              ("b read the same pid", "select pg_terminate_backend(%s::int)", True)):
        a = psycopg.connect(url, autocommit=True)
        origin_pid = a.execute("SELECT pg_backend_pid()").fetchone()[0]
        if b_reads:  # (postgres.js's way: b's own earlier statement read it too)
            check(b.execute("SELECT pg_backend_pid()").fetchone()[0] == origin_pid, "b is shown the same origin pid")
        else:
            check(b.execute("SELECT 9").fetchone()[0] == 9, "b runs a statement on the one origin connection")
        row = (b.execute(sql, [origin_pid]) if "%s" in sql else b.execute(sql.format(origin_pid))).fetchone()
        check(row == (True,), f"{how}: b's pg_terminate_backend(a's origin pid) answers t ({row})")
        terminated(a, f"{how}: a, shown that pid, after b was lent its backend")
        check(b.execute("SELECT 10").fetchone()[0] == 10, f"{how}: b goes on")
    b.close()
    print("PASS")
finally:
    stop(proc)
