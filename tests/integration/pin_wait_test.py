#!/usr/bin/python3
"""Pinned sessions beyond the budget wait for a pinned slot instead of
failing (issue 28, item 3), through `hyperpool serve` with its defaults
(cache on): psycopg clients over `--pool-size 2`.

- 6 clients each create a temporary table, use it in a few statements and
  disconnect: all succeed, none gets 53300.
- While the budget is spent, a third pinning client waits; unpinned clients
  keep being served meanwhile; it goes on as soon as a pinned one leaves.
- A waiting client cancelled (CancelRequest) gets 57014.
- With a short acquire timeout, a waiter that never gets a slot gets the
  pool's acquire-timeout error (53300 "Failed to acquire a connection from
  the pool"); inside a transaction block the block is aborted, as for any
  error.

Needs HYPERPOOL_BINARY and HYPERPOOL_TEST_PG_ENV (ctest sets both).
"""
import os
import subprocess
import sys
import threading
import time

import psycopg

from pgtest_env import ERR, check, fail, origin_url  # beside this script

PROCS = []


def serve(*extra):
    proc = subprocess.Popen([os.environ["HYPERPOOL_BINARY"], "serve", "--origin", origin_url(), "--pool-size", "2",
                             *extra], stdout=subprocess.PIPE, stderr=ERR, text=True)
    PROCS.append(proc)
    url = proc.stdout.readline().strip()
    if not url.startswith("postgresql://"):
        fail("no connection string from serve")
    return url


class Runner(threading.Thread):
    """Runs fn(conn) in a thread; keeps its result or exception."""

    def __init__(self, fn):
        super().__init__(daemon=True)
        self.fn = fn
        self.result = None
        self.error = None

    def run(self):
        try:
            self.result = self.fn()
        except Exception as e:  # noqa: BLE001 (reported by the test)
            self.error = e


def pinning_client(url, n):
    def run():
        with psycopg.connect(url, autocommit=True) as c:
            c.execute(f"CREATE TEMP TABLE pin_wait_{n} (v int)")
            c.execute(f"INSERT INTO pin_wait_{n} SELECT generate_series(1, {n + 3})")
            c.execute(f"UPDATE pin_wait_{n} SET v = v * 2")
            return c.execute(f"SELECT sum(v) FROM pin_wait_{n}").fetchone()[0]
    return run


def wait_done(t, seconds):
    t.join(seconds)
    return not t.is_alive()


try:
    url = serve()

    # 1. The budget spent (pool 2: max_pinned 2 by default), a third pinning
    # client waits while unpinned clients are served; it goes on once a
    # pinned client leaves.
    holders = [psycopg.connect(url, autocommit=True) for _ in range(2)]
    for i, h in enumerate(holders):
        h.execute(f"CREATE TEMP TABLE pin_hold_{i} (v int)")
    waiter = Runner(pinning_client(url, 100))
    waiter.start()
    with psycopg.connect(url, autocommit=True) as plain:
        served = sum(plain.execute("SELECT %s::int + 1", (i,)).fetchone()[0] == i + 1 for i in range(20))
        check(served == 20, "unpinned clients are served while a pin waits")
        for i in range(5):
            plain.execute("BEGIN")
            plain.execute("SELECT count(*) FROM pg_class")
            plain.execute("COMMIT")
    check(waiter.is_alive() and waiter.error is None, "the third pinning client waits (no 53300)")
    holders[0].close()
    check(wait_done(waiter, 20), "it goes on once a pinned client leaves")
    check(waiter.error is None and waiter.result == sum(2 * v for v in range(1, 104)),
          f"...and its temp table works ({waiter.error!r})")
    holders[1].close()

    # 2. Six pinning clients at once over the budget of two: all succeed.
    runners = [Runner(pinning_client(url, n)) for n in range(6)]
    for r in runners:
        r.start()
    for r in runners:
        r.join(60)
    errors = [repr(r.error) for r in runners if r.error is not None or r.is_alive()]
    check(not errors, f"6 clients with temp tables over max_pinned 2: all succeed ({errors})")
    check(all(r.result == sum(2 * v for v in range(1, n + 4)) for n, r in enumerate(runners)),
          "...each with its own temp table's rows")

    # 3. A waiting client cancelled gets 57014.
    holders = [psycopg.connect(url, autocommit=True) for _ in range(2)]
    for i, h in enumerate(holders):
        h.execute(f"CREATE TEMP TABLE pin_hold_{i} (v int)")
    victim = psycopg.connect(url, autocommit=True)
    cancelled = Runner(lambda: victim.execute("CREATE TEMP TABLE pin_cancelled (v int)"))
    cancelled.start()
    deadline = time.monotonic() + 20
    while cancelled.is_alive() and time.monotonic() < deadline:
        victim.cancel()  # (again, until it reaches the wait: a cancel before it is a no-op)
        cancelled.join(0.2)
    check(isinstance(cancelled.error, psycopg.errors.QueryCanceled),
          f"a cancelled waiter gets 57014 ({cancelled.error!r})")
    check(victim.execute("SELECT to_regclass('pg_temp.pin_cancelled') IS NULL").fetchone()[0],
          "...its statement never ran, and the session goes on")
    victim.close()
    for h in holders:
        h.close()
finally:
    for p in PROCS:
        p.terminate()

# 4. A short acquire timeout: a waiter that never gets a slot gets the
# pool's acquire-timeout error.
PROCS = []
try:
    url = serve("--acquire-timeout", "1000", "--max-pinned", "1")
    holder = psycopg.connect(url, autocommit=True)
    holder.execute("CREATE TEMP TABLE pin_hold (v int)")
    late = psycopg.connect(url, autocommit=True)
    start = time.monotonic()
    try:
        late.execute("CREATE TEMP TABLE pin_late (v int)")
        fail("the waiter got a slot although the budget stayed spent")
    except psycopg.errors.TooManyConnections as e:
        check("Failed to acquire a connection from the pool" in str(e),
              f"a waiter that never gets a slot gets the acquire-timeout error ({e})")
    check(time.monotonic() - start >= 0.9, "...after the acquire timeout")
    check(late.execute("SELECT 1").fetchone()[0] == 1, "...and its session goes on")
    late.execute("BEGIN")
    try:
        late.execute("CREATE TEMP TABLE pin_late (v int)")
        fail("the waiter in a block got a slot although the budget stayed spent")
    except psycopg.errors.TooManyConnections:
        pass
    check(late.info.transaction_status == psycopg.pq.TransactionStatus.INERROR,
          "inside a transaction block the timeout aborts the block")
    late.execute("ROLLBACK")
    check(late.execute("SELECT to_regclass('pg_temp.pin_late') IS NULL").fetchone()[0],
          "...and nothing of the statement exists")
    late.close()
    holder.close()
    print("PASS")
finally:
    for p in PROCS:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
