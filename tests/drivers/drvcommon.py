"""Shared pieces of the Python driver programs (asyncpg_test.py, psycopg_test.py).

The workload is the same in every driver program of this directory (see README.md):
8 workers, each on its own connection, each owning two accounts of
drv_<driver>_accounts and checking every value it reads against what it
knows it wrote.
"""
import os
import sys
import threading

WORKERS = 8
ITERATIONS = int(os.environ.get("DRV_ITERATIONS", "60"))
ACCOUNTS = 2 * WORKERS
START_BALANCE = 1000
REF_ROWS = 50
CANCEL_AFTER_S = 0.5
CANCEL_LIMIT_S = 1.0
# One zone per worker, none equal to the server's default (UTC/GMT): a setting
# that leaks from one worker to another, or vanishes, shows as a wrong zone.
ZONES = [
    "Asia/Tokyo", "Europe/Paris", "America/New_York", "Australia/Sydney",
    "Africa/Cairo", "America/Sao_Paulo", "Asia/Kolkata", "Pacific/Auckland",
]


def tables(driver):
    return f"drv_{driver}_accounts", f"drv_{driver}_ref"


def setup_sql(driver):
    acc, ref = tables(driver)
    return [
        f"DROP TABLE IF EXISTS {acc}",
        f"DROP TABLE IF EXISTS {ref}",
        f"CREATE TABLE {acc} (id int PRIMARY KEY, balance bigint NOT NULL)",
        f"CREATE TABLE {ref} (k int PRIMARY KEY, v text NOT NULL)",
        f"INSERT INTO {acc} SELECT g, {START_BALANCE} FROM generate_series(1, {ACCOUNTS}) g",
        f"INSERT INTO {ref} SELECT g, 'v' || g FROM generate_series(1, {REF_ROWS}) g",
    ]


def statements(driver):
    """The statement texts every worker uses, repeated many times ($n placeholders)."""
    acc, ref = tables(driver)
    return {
        "ref": f"SELECT v FROM {ref} WHERE k = $1",
        "balance": f"SELECT balance FROM {acc} WHERE id = $1",
        "pair": f"SELECT sum(balance)::bigint FROM {acc} WHERE id IN ($1, $2)",
        "credit": f"UPDATE {acc} SET balance = balance + $1 WHERE id = $2",
        "debit": f"UPDATE {acc} SET balance = balance - $1 WHERE id = $2",
        # Same text for every worker of one parity, different across parities:
        # a pooled connection sees texts that other clients prepared.
        "probe_even": "SELECT $1::int * 2 AS v",
        "probe_odd": "SELECT $1::int * 3 AS v",
    }


def probe(worker):
    """(statement key, multiplier) of this worker's probe statement."""
    return ("probe_even", 2) if worker % 2 == 0 else ("probe_odd", 3)


def ops_order(worker):
    """Per-iteration operations, rotated per worker so that drivers which name
    statements by a per-connection counter (__asyncpg_stmt_1__, _pg3_0, S_1 ...)
    give the same name to different texts on different connections."""
    ops = ["ref", "balance", "probe", "pair", "transfer"]
    r = worker % len(ops)
    return ops[r:] + ops[:r]


class Report:
    """One line per check on stdout, and a summary line at the end."""

    def __init__(self, driver):
        self.driver = driver
        self.passed = 0
        self.failed = 0
        self.errors = 0
        self.lock = threading.Lock()

    def check(self, ok, name, detail=""):
        with self.lock:
            if ok:
                self.passed += 1
            else:
                self.failed += 1
            print(f"{'ok  ' if ok else 'FAIL'} {self.driver}: {name}{(' - ' + detail) if detail else ''}",
                  flush=True)
        return ok

    def error(self, where, exc):
        with self.lock:
            self.errors += 1
            code = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None) or ""
            lines = str(exc).strip().splitlines() or [""]
            print(f"ERROR {self.driver}: {where}: {type(exc).__name__}"
                  f"{(' [' + code + ']') if code else ''}: {lines[0]}", flush=True)

    def finish(self):
        ok = self.failed == 0 and self.errors == 0 and self.passed > 0
        print(f"SUMMARY {self.driver}: {'PASS' if ok else 'FAIL'} "
              f"({self.passed} checks passed, {self.failed} failed, {self.errors} errors)", flush=True)
        sys.stdout.flush()
        # os._exit: a worker thread stuck in a driver call must not keep us alive.
        os._exit(0 if ok else 1)


class WorkerStats:
    def __init__(self, worker):
        self.worker = worker
        self.reads = 0
        self.bad_reads = []
        self.commits = 0
        self.rollbacks = 0
        self.tz_checks = 0
        self.bad_tz = []
        self.done = 0

    def bad_read(self, what, got, want):
        if len(self.bad_reads) < 5:
            self.bad_reads.append(f"{what}: got {got!r}, want {want!r}")
        else:
            self.bad_reads.append(None)

    def tz(self, where, got, want):
        self.tz_checks += 1
        if got != want:
            self.bad_tz.append(f"{where}: SHOW TimeZone = {got!r}, want {want!r}")

    def report(self, rep, zone):
        w = self.worker
        rep.check(self.done == ITERATIONS, f"worker {w} workload",
                  f"{self.done}/{ITERATIONS} iterations, {self.reads} checked reads, "
                  f"{self.commits} commits, {self.rollbacks} rollbacks")
        shown = [b for b in self.bad_reads if b]
        rep.check(not self.bad_reads, f"worker {w} read values",
                  f"{len(self.bad_reads)} wrong: {'; '.join(shown)}" if self.bad_reads
                  else f"{self.reads} reads as expected")
        rep.check(not self.bad_tz and self.tz_checks >= 5, f"worker {w} session TimeZone {zone}",
                  f"{len(self.bad_tz)}/{self.tz_checks} wrong: {'; '.join(self.bad_tz[:3])}" if self.bad_tz
                  else f"only {self.tz_checks} checks: the worker stopped early" if self.tz_checks < 5
                  else f"{self.tz_checks} checks, always its own zone")
