#!/usr/bin/python3
"""A `serve` with several databases ([databases] in its config) and the WAL
feed in its default (`auto`), a max age of an hour: a row updated straight
on the origin is never read back old through hyperpool, also by a client
that connects after every client of that database has gone. With several
databases there is no invalidation watch; what keeps the Client tier
honest is that, while the feed limits serving, a result reaches it with no
more time to live than the feed's budget (WalFeedCore::Budget).

Runs against a PostgreSQL of its own (wal_level = logical), stopped even
when the test fails. Needs HYPERPOOL_BINARY (ctest sets it).
"""
import os
import tempfile

import psycopg

from pgtest_env import check, serve_metrics, start_cluster, start_serve, stop_cluster, stop_serve, wait_for  # beside this script

ROUNDS = 5


def main():
    base = tempfile.mkdtemp(prefix="hp-waldbs-")
    serve = None
    try:
        env, direct = start_cluster(base, "wal_level = logical")
        with psycopg.connect(direct, autocommit=True) as c:
            c.execute("CREATE DATABASE other")
            c.execute("CREATE TABLE kv (id int PRIMARY KEY, v int NOT NULL)")
            c.execute("INSERT INTO kv VALUES (1, 0)")
        pwfile = os.path.join(base, "origin.pw")
        with open(pwfile, "w") as f:
            f.write(env["ADMIN_PASSWORD"] + "\n")
        os.chmod(pwfile, 0o600)
        origin = f"postgresql://{env['ADMIN_USER']}@{env['PGHOST']}:{env['PGPORT']}"
        config = os.path.join(base, "serve.toml")
        with open(config, "w") as f:
            f.write(f"""[listen]
address = "127.0.0.1:0"
[client]
database = "{env['PGDATABASE']}"
[cache]
max_age_s = 3600
[metrics]
listen = "127.0.0.1:0"
[databases.{env['PGDATABASE']}]
url = "{origin}/{env['PGDATABASE']}?sslmode=disable"
password_file = "{pwfile}"
pool_size = 2
[databases.other]
url = "{origin}/other?sslmode=disable"
password_file = "{pwfile}"
pool_size = 2
""")
        os.chmod(config, 0o600)
        serve, url = start_serve(["--config", config])
        label = '{database="%s"}' % env["PGDATABASE"]
        wait_for(lambda: serve_metrics().get("hyperpool_wal_feed_serving" + label, 0) == 1, "the feed streaming", 15)
        for i in range(ROUNDS):
            # Read twice (the second may be a hit), then leave.
            with psycopg.connect(url, autocommit=True) as r:
                for _ in range(2):
                    v = r.execute("SELECT v FROM kv WHERE id = 1").fetchone()[0]
                    check(v == i, f"round {i}: read {v}, the row holds {i}")
            # Counted before the write: the feed may apply it at once.
            before = serve_metrics().get("hyperpool_wal_feed_invalidations_total" + label, 0)
            with psycopg.connect(direct, autocommit=True) as w:
                w.execute("UPDATE kv SET v = %s WHERE id = 1", (i + 1,))
                lsn = w.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
            wait_for(lambda: serve_metrics().get("hyperpool_wal_feed_invalidations_total" + label, 0) > before,
                     f"the feed applying the update at {lsn}", 15)
        with psycopg.connect(url, autocommit=True) as r:
            v = r.execute("SELECT v FROM kv WHERE id = 1").fetchone()[0]
            check(v == ROUNDS, f"the last read: {v}, the row holds {ROUNDS}")
        print({k: v for k, v in serve_metrics().items() if "cache_hits" in k or "cache_stores" in k or "refused" in k})
        print("PASS")
    finally:
        if serve:
            stop_serve(serve)
        stop_cluster(base)


if __name__ == "__main__":
    main()
