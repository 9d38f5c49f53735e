#!/usr/bin/python3
"""PgBouncer's "*" entry (issue 28, item 10): with [databases."*"] in the
config, `hyperpool serve` serves any database name on the same origin, the
app's database name as the origin database, each with a pool of its own made
at first use:
- a database created after serve started is reached and queried
  (current_database() is its name);
- the cap (max_databases = 1) refuses one more at once with FATAL 53400,
  and frees the place of an idle one;
- a "*" database the app used and left can be dropped (its idle origin
  connections close a second after its last session);
- per-user permissions still apply (42501 for a name not in the user's
  list);
- without the "*" entry the same name gets 3D000 at login, as before.

Needs HYPERPOOL_BINARY and HYPERPOOL_TEST_PG_ENV (ctest sets both).
"""
import os
import subprocess
import sys
import tempfile
import time
import urllib.parse

import psycopg

from pgtest_env import ERR, check, fail, env_get, origin_url  # beside this script

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "adversarial"))
import wire  # noqa: E402

PID = os.getpid()
DB_MAIN = "hp_any_main_%d" % PID
DB_NEW = ["hp_any_new_%d_%d" % (PID, i) for i in range(2)]
APP_PW = "app-pw-%d" % PID
REP_PW = "rep-pw-%d" % PID
TMP = tempfile.mkdtemp()


def admin():
    return psycopg.connect(origin_url(), autocommit=True)


def origin_for(db):
    return "postgresql://%s@%s:%s/%s?sslmode=disable" % (
        env_get("ADMIN_USER"), env_get("PGHOST"), env_get("PGPORT"), db)


def write_config(with_any):
    pw_file = os.path.join(TMP, "origin-pw")
    rep_file = os.path.join(TMP, "rep-pw")
    for path, value in ((pw_file, env_get("ADMIN_PASSWORD")), (rep_file, REP_PW)):
        with open(path, "w") as f:
            f.write(value + "\n")
        os.chmod(path, 0o600)
    text = """threads = 1
[client]
user = "app"
database = "%s"
password = "%s"
[databases.%s]
url = "%s"
password_file = "%s"
pool_size = 2
""" % (DB_MAIN, APP_PW, DB_MAIN, origin_for(DB_MAIN), pw_file)
    if with_any:
        text += """[databases."*"]
url = "%s"
password_file = "%s"
pool_size = 2
max_databases = 1
""" % (origin_for("postgres"), pw_file)
    text += """[users]
rep = { password_file = "%s", databases = ["%s"] }
""" % (rep_file, DB_MAIN)
    path = os.path.join(TMP, "hp-%s.toml" % ("any" if with_any else "plain"))
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)
    return path


def serve(config):
    proc = subprocess.Popen([os.environ["HYPERPOOL_BINARY"], "serve", "--config", config],
                            stdout=subprocess.PIPE, stderr=ERR, text=True)
    url = proc.stdout.readline().strip()
    if not url.startswith("postgresql://"):
        proc.kill()
        fail("no connection string from serve")
    return proc, urllib.parse.urlparse(url).port


def dsn(port, db, user="app", password=APP_PW):
    return "host=127.0.0.1 port=%d user=%s password=%s dbname=%s sslmode=disable" % (port, user, password, db)


def sqlstate_of(port, db, user="app", password=APP_PW):
    """The SQLSTATE of the ErrorResponse a login to `db` and a first query end
    with, or None (raw protocol: what a driver is told, exactly)."""
    conn = wire.Conn("127.0.0.1", port)
    try:
        conn.send(wire.startup({"user": user, "database": db}))
        msgs = conn.scram(password)
        if msgs and msgs[-1][0] == "R":
            msgs = conn.read_until("ZE")
            if msgs and msgs[-1][0] == "Z":
                conn.send(wire.query("SELECT 1"))
                msgs = conn.read_until("ZE")
        errors = [wire.error_fields(p) for t, p in msgs if t == "E"]
        return errors[0]["C"] if errors else None
    finally:
        conn.close()


def main():
    with admin() as a:
        for db in [DB_MAIN] + DB_NEW:
            a.execute("DROP DATABASE IF EXISTS %s WITH (FORCE)" % db)
        a.execute("CREATE DATABASE %s" % DB_MAIN)
    procs = []
    try:
        proc, port = serve(write_config(True))
        procs.append(proc)
        with admin() as a:  # after serve started
            for db in DB_NEW:
                a.execute("CREATE DATABASE %s" % db)
        with psycopg.connect(dsn(port, DB_NEW[0]), autocommit=True) as c:
            check(c.execute("SELECT current_database()").fetchone()[0] == DB_NEW[0],
                  "a database created after start is served through \"*\"")
            # The cap: one "*" database in use, a second one is refused.
            state = sqlstate_of(port, DB_NEW[1])
            check(state == "53400", "over max_databases: SQLSTATE %s (want 53400)" % state)
        # Idle once its session has ended on the Endpoint (asynchronously
        # after the app's close): its place goes to the next one.
        deadline = time.monotonic() + 10
        while sqlstate_of(port, DB_NEW[1]) == "53400" and time.monotonic() < deadline:
            time.sleep(0.05)
        with psycopg.connect(dsn(port, DB_NEW[1]), autocommit=True) as c:
            check(c.execute("SELECT current_database()").fetchone()[0] == DB_NEW[1],
                  "an idle \"*\" database makes room for another")
        state = sqlstate_of(port, DB_NEW[0], "rep", REP_PW)
        check(state == "42501", "a user limited to %s: SQLSTATE %s (want 42501)" % (DB_MAIN, state))
        with psycopg.connect(dsn(port, DB_MAIN), autocommit=True) as c:
            check(c.execute("SELECT current_database()").fetchone()[0] == DB_MAIN, "the named database still works")
            # An app drops a "*" database it used and left (asyncpg's suite
            # does): hyperpool's idle origin connections to it must not hold
            # it open (PostgreSQL waits 5 s for other backends, then 55006).
            try:
                c.execute("DROP DATABASE %s" % DB_NEW[1])
                dropped = None
            except psycopg.Error as e:
                dropped = "%s %s" % (e.sqlstate, e)
            check(dropped is None, "DROP DATABASE of a \"*\" database the app used and left (%s)" % dropped)
        proc.terminate()
        proc.wait(15)
        proc, port = serve(write_config(False))
        procs.append(proc)
        state = sqlstate_of(port, DB_NEW[0])
        check(state == "3D000", "without \"*\": SQLSTATE %s (want 3D000)" % state)
        print("PASS")
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                p.wait(15)
        with admin() as a:
            for db in [DB_MAIN] + DB_NEW:
                a.execute("DROP DATABASE IF EXISTS %s WITH (FORCE)" % db)


if __name__ == "__main__":
    main()
