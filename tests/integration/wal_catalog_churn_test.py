#!/usr/bin/python3
"""The WAL feed never makes hyperpool read the origin's catalog continuously.

A transaction that changes no table row still shows in test_decoding as an
empty BEGIN/COMMIT: DDL, GRANT, ANALYZE, a temporary table. The
feed cannot tell these apart, so each counts as a catalog change: every
cached row of the database is dropped and the catalog is unknown. An
application that commits such transactions straight to the origin (here:
a temporary table per transaction, in a loop) while readers read through `serve` must not
turn that into one catalog read (five queries over pg_proc, pg_class,
pg_type, ...) after another on the origin: the feed's catalog changes are
read again at most once a second (EndpointCache::CatalogChange::kFromFeed).
The reads stay correct: each returns the row's current value.

Runs against a PostgreSQL of its own (pgcluster.sh, wal_level = logical),
stopped even when the test fails. Needs HYPERPOOL_BINARY (ctest sets it).
"""
import os
import subprocess
import tempfile
import threading
import time

import psycopg

from pgtest_env import ERR, check, fail, serve_metrics, start_cluster, stop_cluster, stop_serve, wait_for  # beside this script

WINDOW = 3.0  # seconds of churn


def catalog_reads():
    return serve_metrics().get('hyperpool_cache_catalog_reads_total{tier="endpoint"}', 0)


def main():
    base = tempfile.mkdtemp(prefix="hp-walchurn-")
    serve = None
    binary = os.environ["HYPERPOOL_BINARY"]
    try:
        _, direct = start_cluster(base, "wal_level = logical")
        with psycopg.connect(direct, autocommit=True) as c:
            c.execute("CREATE TABLE kv (id int PRIMARY KEY, v bigint NOT NULL)")
            c.execute("INSERT INTO kv VALUES (1, 7), (2, 0)")
        serve = subprocess.Popen([binary, "serve", "--origin", direct, "--pool-size", "4", "--cache-max-age", "3600",
                                  "--wal-invalidation", "on", "--metrics-listen", "127.0.0.1:0"],
                                 stdout=subprocess.PIPE, stderr=ERR, text=True)
        url = serve.stdout.readline().strip()
        if not url.startswith("postgresql://"):
            fail("no connection string from serve")
        wait_for(lambda: serve_metrics().get("hyperpool_wal_feed_serving", 0) == 1, "the feed streaming", 15)

        stop = threading.Event()
        locks = [0]

        def locker():
            with psycopg.connect(direct) as c:
                while not stop.is_set():
                    c.execute("CREATE TEMPORARY TABLE scratch (x int) ON COMMIT DROP")
                    c.execute("INSERT INTO scratch VALUES (1)")
                    c.commit()
                    locks[0] += 1

        t = threading.Thread(target=locker, daemon=True)
        with psycopg.connect(url, autocommit=True) as reader:
            reader.execute("SELECT v FROM kv WHERE id = %s", (1,)).fetchone()  # the catalog read at start
            t.start()
            wait_for(lambda: locks[0] > 10, "the temporary-table transactions committing", 15)
            before = catalog_reads()
            reads = 0
            deadline = time.monotonic() + WINDOW
            while time.monotonic() < deadline:
                v = reader.execute("SELECT v FROM kv WHERE id = %s", (1,)).fetchone()[0]
                check(v == 7, f"read {v}, the row holds 7")
                reads += 1
            after = catalog_reads()
        stop.set()
        t.join(10)
        n = after - before
        m = serve_metrics()
        print({k: v for k, v in m.items() if "wal_feed" in k or "cache_hits" in k or "catalog" in k})
        check(m.get("hyperpool_wal_feed_transactions_total", 0) > 10, "the feed saw the empty commits")
        print(f"{locks[0]} temporary-table transactions straight to the origin, {reads} reads through serve, "
              f"{n:.0f} catalog reads in {WINDOW:.0f} s")
        check(reads > 10, f"only {reads} reads in {WINDOW} s")
        # At most one per second (plus one in flight at each end, and a
        # retry for a read the churn raced).
        check(n <= WINDOW + 3, f"{n:.0f} catalog reads in {WINDOW:.0f} s: the feed's empty commits drive them")
        print("PASS")
    finally:
        if serve:
            stop_serve(serve)
        stop_cluster(base)


if __name__ == "__main__":
    main()
