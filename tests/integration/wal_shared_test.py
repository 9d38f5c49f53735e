#!/usr/bin/python3
"""An external write reaches every tier (issue 29): two `hyperpool serve`
Endpoints of one origin share a Redis tier; only A runs the change feed
(--wal-invalidation on), B does not (off), both with a max age of an hour.
A psycopg writer updates a row straight to the origin; a reader through each
serve (each with its own Client tier, an Endpoint tier and Redis behind)
must see every new value: through A by its own feed, through B by A's
invalidation relayed over Redis pub/sub (B's local tier and its Client's
tier drop the rows). Without A's feed, B would serve the old value for an
hour. Prints how long each reader took to see each write.

Runs against a PostgreSQL and a redis-server of its own, stopped even when
the test fails. Needs HYPERPOOL_BINARY (ctest sets it).
"""
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time

import psycopg

from pgtest_env import ERR, check, err_text, fail, serve_metrics, start_cluster, stop_cluster, wait_for  # beside this script

WRITES = 5


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def hits(index):
    return sum(v for k, v in serve_metrics(index).items()
               if k.startswith("hyperpool_cache_hits_total") or k.startswith("hyperpool_cache_shared_hits_total"))


def main():
    base = tempfile.mkdtemp(prefix="hp-walshared-")
    redis_dir = tempfile.mkdtemp(prefix="hp-walshared-redis-")
    procs = []
    binary = os.environ["HYPERPOOL_BINARY"]
    try:
        env, direct = start_cluster(base, "wal_level = logical\nsynchronous_commit = on")
        redis_port = free_port()
        redis = subprocess.Popen(["/usr/bin/redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save",
                                  "", "--appendonly", "no", "--dir", redis_dir], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        procs.append(redis)

        def redis_up():
            try:
                socket.create_connection(("127.0.0.1", redis_port), timeout=0.2).close()
                return True
            except OSError:
                return False
        wait_for(redis_up, "redis-server listening", 10)
        with psycopg.connect(direct, autocommit=True) as c:
            c.execute("CREATE TABLE shared_kv (id int PRIMARY KEY, v bigint NOT NULL)")
            c.execute("INSERT INTO shared_kv VALUES (1, 0)")
        urls = []
        for mode in ("on", "off"):
            p = subprocess.Popen([binary, "serve", "--origin", direct, "--cache-max-age", "3600", "--wal-invalidation",
                                  mode, "--redis-url", f"redis://127.0.0.1:{redis_port}", "--metrics-listen",
                                  "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=ERR, text=True)
            procs.append(p)
            url = p.stdout.readline().strip()
            if not url.startswith("postgresql://"):
                fail(f"no connection string from serve --wal-invalidation {mode}")
            urls.append(url)
            wait_for(lambda: len(re.findall(r"metrics on", err_text())) == len(urls), "serve's metrics address", 10)
        wait_for(lambda: "event=wal_feed_streaming" in err_text(), "A's feed streaming", 15)
        readers = [psycopg.connect(u, autocommit=True) for u in urls]

        def read(i):
            return readers[i].execute("SELECT v FROM shared_kv WHERE id = %s", (1,)).fetchone()[0]
        for i in (0, 1):
            wait_for(lambda: read(i) is not None and hits(i) > 0, f"a cache hit through serve {'AB'[i]}", 15)
        writer = psycopg.connect(direct, autocommit=True)
        lags = ([], [])
        for n in range(1, WRITES + 1):
            before = hits(1)
            for _ in range(5):
                read(1)
            check(hits(1) >= before + 4, f"write {n}: B answers the old value from its cache before the write")
            writer.execute("UPDATE shared_kv SET v = %s WHERE id = 1", (n,))
            acked = time.monotonic()
            for i in (0, 1):
                wait_for(lambda: read(i) == n, f"write {n} seen through serve {'AB'[i]}", 5)
                lags[i].append(time.monotonic() - acked)
        for i, name in ((0, "A (feed on)"), (1, "B (feed off, Redis)")):
            print(f"{name}: new value seen {', '.join(f'{x * 1000:.1f}' for x in lags[i])} ms after each write")
        check(max(lags[1]) < 1.0, "an external write reached B's tiers through A's feed and Redis within a second")
        print("PASS")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        stop_cluster(base)
        shutil.rmtree(redis_dir, ignore_errors=True)


main()
