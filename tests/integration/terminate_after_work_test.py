#!/usr/bin/python3
"""Work sent just before a Terminate runs, as PostgreSQL runs it: a client
that sends an INSERT and closes without waiting for the answer (the
Terminate right behind it, often in the same packet) gets its row
committed directly. Through `hyperpool serve` (defaults, cache on, pool 2)
the Client closed the link right after the Terminate, and the Endpoint
dropped the INSERT: 0 of 20 rows (SessionCore::OnClientGone, Session::Run,
HasTerminate). Simple and extended protocol, 20 clients each.

Needs HYPERPOOL_BINARY and HYPERPOOL_TEST_PG_ENV (ctest sets both).
"""
import time

import psycopg

from pgtest_env import check, origin_url, start_serve, stop_serve  # beside this script

ROUNDS = 20


def fire(url, sql, extended):
    c = psycopg.connect(url, autocommit=True)
    if extended:
        c.pgconn.send_query_params(sql.encode(), None)
    else:
        c.pgconn.send_query(sql.encode())
    while c.pgconn.flush() != 0:
        pass
    c.close()  # the Terminate, without reading the answer


direct = origin_url()
with psycopg.connect(direct, autocommit=True) as d:
    d.execute("DROP TABLE IF EXISTS terminate_after_work")
    d.execute("CREATE TABLE terminate_after_work (mode text, i int)")
proc, url = start_serve(["--origin", direct, "--pool-size", "2"])
try:
    for mode in ("simple", "extended"):
        for i in range(ROUNDS):
            fire(url, f"INSERT INTO terminate_after_work VALUES ('{mode}', {i})", mode == "extended")

        def count():
            with psycopg.connect(direct, autocommit=True) as d:
                return d.execute("SELECT count(*) FROM terminate_after_work WHERE mode = %s", (mode,)).fetchone()[0]
        # The last ones may still be running: wait until all are in (or time out).
        deadline = time.monotonic() + 10
        while count() < ROUNDS and time.monotonic() < deadline:
            time.sleep(0.05)
        n = count()
        check(n == ROUNDS, f"{mode}: {n} of {ROUNDS} INSERTs sent right before Terminate committed (directly: all)")
    print("PASS")
finally:
    stop_serve(proc)
