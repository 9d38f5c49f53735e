#!/usr/bin/python3
"""psycopg 3 against a PostgreSQL URL, with prepare_threshold=0 (every statement
is prepared server-side on first use, under psycopg's own names _pg3_N).

usage: psycopg_test.py URL      (postgresql://USER:PASS@HOST:PORT/DB?sslmode=disable)

8 threads, each on its own connection (see README.md for the workload and checks).
Exit 0 only if every check held and no statement failed.
"""
import re
import sys
import threading
import time

import psycopg
from psycopg import errors

from drvcommon import (ACCOUNTS, CANCEL_AFTER_S, CANCEL_LIMIT_S, ITERATIONS, REF_ROWS,
                       START_BALANCE, WORKERS, ZONES, Report, WorkerStats, ops_order, probe,
                       setup_sql, statements, tables)

DRIVER = "psycopg"
DEADLINE_S = 50


def pg(sql):
    """$n placeholders -> psycopg's %s (the texts are shared with other drivers)."""
    return re.sub(r"\$\d+", "%s", sql)


def connect(url):
    return psycopg.connect(url, autocommit=True, prepare_threshold=0, connect_timeout=10)


def one(conn, sql, params=None):
    row = conn.execute(sql, params).fetchone()
    return row[0] if row else None


def cancel_check(conn, rep, label=""):
    """psycopg's cancel API: Connection.cancel() from another thread (libpq PQcancel,
    a CancelRequest on a new connection to the same host and port)."""
    rep.cancel_done = True
    fired = {}

    def fire():
        fired["t"] = time.monotonic()
        conn.cancel()

    timer = threading.Timer(CANCEL_AFTER_S, fire)
    timer.start()
    outcome, code = "completed", None
    try:
        conn.execute("SELECT pg_sleep(30)")
    except errors.QueryCanceled as e:
        outcome, code = "QueryCanceled", e.sqlstate
    except psycopg.Error as e:
        outcome, code = f"{type(e).__name__}: {e}", e.sqlstate
    end = time.monotonic()
    timer.join()
    t_end = end - fired.get("t", end)
    t0 = time.monotonic()
    val = one(conn, "SELECT 1")
    t_one = time.monotonic() - t0
    rep.check(code == "57014" and t_end <= CANCEL_LIMIT_S and val == 1 and t_one <= CANCEL_LIMIT_S,
              "cancel pg_sleep(30) via Connection.cancel()" + label,
              f"{outcome} SQLSTATE {code} "
              f"{f'{t_end:.3f}s after the cancel' if 't' in fired and end >= fired['t'] else 'BEFORE the cancel was sent'}; "
              f"SELECT 1 on the same connection -> {val!r} in {t_one:.3f}s")


def worker(w, url, rep, S, stats, balances):
    zone = ZONES[w]
    a, b = 2 * w + 1, 2 * w + 2
    bal = {a: START_BALANCE, b: START_BALANCE}
    try:
        with connect(url) as conn:
            conn.execute(f"SET TimeZone = '{zone}'")
            stats.tz("after SET", one(conn, "SHOW TimeZone"), zone)
            pkey, mult = probe(w)
            for i in range(ITERATIONS):
                for op in ops_order(w):
                    if op == "ref":
                        k = (w * 7 + i) % REF_ROWS + 1
                        got = one(conn, S["ref"], (k,))
                        stats.reads += 1
                        if got != f"v{k}":
                            stats.bad_read(f"ref {k}", got, f"v{k}")
                    elif op == "balance":
                        acct = a if i % 2 else b
                        got = one(conn, S["balance"], (acct,))
                        stats.reads += 1
                        if got != bal[acct]:
                            stats.bad_read(f"balance {acct}", got, bal[acct])
                    elif op == "probe":
                        x = i + w
                        got = one(conn, S[pkey], (x,))
                        stats.reads += 1
                        if got != x * mult:
                            stats.bad_read(f"{pkey}({x})", got, x * mult)
                    elif op == "pair":
                        got = one(conn, S["pair"], (a, b))
                        stats.reads += 1
                        if got != bal[a] + bal[b]:
                            stats.bad_read("pair sum", got, bal[a] + bal[b])
                    elif op == "transfer":
                        amt = i % 5 + 1
                        src, dst = (a, b) if i % 2 == 0 else (b, a)
                        rollback = i % 10 == 9
                        with conn.transaction():
                            conn.execute(S["credit"], (amt, dst))
                            conn.execute(S["debit"], (amt, src))
                            got = one(conn, S["balance"], (dst,))
                            stats.reads += 1
                            if got != bal[dst] + amt:
                                stats.bad_read(f"in-transaction balance {dst}", got, bal[dst] + amt)
                            if i % 4 == 0:
                                stats.tz("inside a transaction", one(conn, "SHOW TimeZone"), zone)
                            if rollback:
                                raise psycopg.Rollback()
                        if rollback:
                            stats.rollbacks += 1
                        else:
                            stats.commits += 1
                            bal[dst] += amt
                            bal[src] -= amt
                if i % 6 == 0:
                    stats.tz(f"iteration {i}", one(conn, "SHOW TimeZone"), zone)
                if w == 0 and i == ITERATIONS // 2:
                    cancel_check(conn, rep)
                stats.done += 1
            stats.tz("at the end", one(conn, "SHOW TimeZone"), zone)
    except Exception as e:
        rep.error(f"worker {w} iteration {stats.done}", e)
    finally:
        balances.update(bal)


def hygiene_check(url, rep):
    """What a pooler must not change (psycopg's test_notify_handlers, libpq's
    application_name default): an app without application_name sees '', and its
    own notifications carry the pid of its BackendKeyData."""
    with connect(url) as conn:
        name = one(conn, "SHOW application_name")
        rep.check(name == "", "application_name default", repr(name))
        got = []
        conn.add_notify_handler(got.append)
        conn.execute("LISTEN hp_drv_chan")
        conn.execute("NOTIFY hp_drv_chan, 'hi'")
        conn.execute("SELECT 1")
        pids = [n.pid for n in got]
        rep.check(pids == [conn.info.backend_pid], "own notification pid",
                  f"{pids} vs backend_pid {conn.info.backend_pid}")


def main(url):
    rep = Report(DRIVER)
    S = {k: pg(v) for k, v in statements(DRIVER).items()}
    acc, _ = tables(DRIVER)
    try:
        with connect(url) as conn:
            for sql in setup_sql(DRIVER):
                conn.execute(sql)
        rep.check(True, "setup", f"{acc} with {ACCOUNTS} accounts")
    except Exception as e:
        rep.error("setup", e)
        rep.finish()
    try:
        hygiene_check(url, rep)
    except Exception as e:
        rep.error("hygiene check", e)

    stats = [WorkerStats(w) for w in range(WORKERS)]
    balances = {}
    threads = [threading.Thread(target=worker, args=(w, url, rep, S, stats[w], balances), daemon=True)
               for w in range(WORKERS)]
    deadline = time.monotonic() + DEADLINE_S
    for t in threads:
        t.start()
    for w, t in enumerate(threads):
        t.join(max(0.0, deadline - time.monotonic()))
        if t.is_alive():
            rep.error(f"worker {w}", TimeoutError(f"did not finish within {DEADLINE_S}s"))
    for w in range(WORKERS):
        stats[w].report(rep, ZONES[w])
    if not getattr(rep, "cancel_done", False):
        # Worker 0 stopped before its mid-run cancel: still say whether cancel works.
        try:
            with connect(url) as conn:
                cancel_check(conn, rep, " (own connection: worker 0 stopped early)")
        except Exception as e:
            rep.error("cancel check", e)

    try:
        with connect(url) as conn:
            got = dict(conn.execute(f"SELECT id, balance FROM {acc} ORDER BY id").fetchall())
            total = one(conn, f"SELECT sum(balance)::bigint FROM {acc}")
        wrong = [f"{k}: {got.get(k)} != {v}" for k, v in sorted(balances.items()) if got.get(k) != v]
        rep.check(not wrong and len(balances) == ACCOUNTS, "final balances match committed transfers",
                  "; ".join(wrong[:5]) or f"{len(balances)} accounts")
        rep.check(total == ACCOUNTS * START_BALANCE, "sum invariant",
                  f"sum {total}, want {ACCOUNTS * START_BALANCE}")
    except Exception as e:
        rep.error("final check", e)
    rep.finish()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
