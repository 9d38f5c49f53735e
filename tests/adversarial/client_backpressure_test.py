"""Backpressure from a busy origin connection to an app's input (issue 28,
item 8): a client pipelining ~200 MB of large Bind messages while its origin
connection is busy (its first query waits on a lock a direct connection
holds) is read only up to the pending bound (--max-pending-to-origin,
default 4 MiB), as PostgreSQL stops reading its socket while it executes:
`serve`'s peak RSS (VmHWM) stays within the bound plus an allowance, the
sender stalls, and once the lock goes every result arrives, in order.
Checked for a plain session and for a pinned one (a temporary table keeps it
on its connection), and for COPY data.
"""

import os
import struct
import sys
import threading
import time

import psycopg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wire  # noqa: E402
from wire import check  # noqa: E402

MIB = 1024  # in KiB, as /proc reports
VALUE = 256 * 1024  # bytes per Bind parameter (asyncpg's executemany of 256 kB rows)
UNITS = 800  # 800 x 256 KiB = 200 MiB
ALLOWANCE = 32 * MIB  # socket buffers of both hops, frames in flight, allocator slack
SERVE = None
ORIGIN = None


def vm_hwm_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise wire.Fail("no VmHWM")


def reset_hwm(pid):
    """Resets VmHWM to the current RSS (Linux: write 5 to clear_refs)."""
    with open("/proc/%d/clear_refs" % pid, "w") as f:
        f.write("5")


def big_unit(i):
    value = (b"%08d" % i) + b"v" * (VALUE - 8)
    p = b"\0" + b"SELECT left($1, 8), length($1)\0" + struct.pack("!H", 0)
    b = b"\0\0" + struct.pack("!HH", 0, 1) + struct.pack("!i", len(value)) + value + struct.pack("!H", 0)
    return wire.frame("P", p) + wire.frame("B", b) + wire.frame("E", b"\0\0\0\0\0") + wire.frame("S")


class Sender(threading.Thread):
    """Sends `chunks` in order, counting bytes taken by the kernel."""

    def __init__(self, conn, chunks):
        super().__init__(daemon=True)
        self.conn, self.chunks, self.sent, self.error = conn, chunks, 0, None

    def run(self):
        try:
            for c in self.chunks:
                self.conn.sock.sendall(c)
                self.sent += len(c)
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.error = e


def stalled(sender, total, quiet=1.0, seconds=30):
    """Waits until the sender finished (False) or made no progress for `quiet` s (True)."""
    deadline = time.monotonic() + seconds
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        if sender.sent >= total or sender.error:
            return False
        if sender.sent != last:
            last, since = sender.sent, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return True
        time.sleep(0.05)
    return True


def pipeline_against_busy_origin(setup_sql, chunks, read_results):
    """Holds the table lock, sends `setup_sql` (blocks on it) then `chunks`;
    measures the peak; releases; `read_results(conn)` checks the answers."""
    total = sum(len(c) for c in chunks)
    locker = psycopg.connect(ORIGIN)
    locker.execute("LOCK TABLE bp_t IN ACCESS EXCLUSIVE MODE")
    conn = wire.Conn(SERVE.host, SERVE.port, timeout=120)
    try:
        conn.login(SERVE.user, SERVE.password, SERVE.database)
        conn.send(wire.query("SELECT 1"))
        conn.read_until("Z")
        reset_hwm(SERVE.proc.pid)
        base = wire.rss_kib(SERVE.proc.pid)
        conn.send(setup_sql)
        sender = Sender(conn, chunks)
        sender.start()
        was_stalled = stalled(sender, total)
        peak = vm_hwm_kib(SERVE.proc.pid)
        print("  sent %d of %d MiB before stalling, baseline %d MiB, peak %d MiB" % (
            sender.sent >> 20, total >> 20, base // MIB, peak // MIB))
        locker.rollback()
        read_results(conn)
        sender.join(60)
        check(sender.error is None, "sender failed: %r" % (sender.error,))
        peak = vm_hwm_kib(SERVE.proc.pid)
        print("  peak over the whole run %d MiB" % (peak // MIB))
        check(was_stalled, "serve read all %d MiB while its origin connection was busy" % (total >> 20))
        check(peak - base < 4 * MIB + ALLOWANCE, "peak RSS %d MiB above a %d MiB baseline" % (
            (peak - base) // MIB, base // MIB))
    finally:
        locker.close()
        conn.close()


def read_units(conn, first_tags):
    msgs = conn.read_until("Z")
    check(msgs and msgs[-1][0] == "Z" and not any(t == "E" for t, _ in msgs), "first query: %r" % (msgs[-2:],))
    for i in range(UNITS):
        msgs = conn.read_until("Z")
        rows = [p for t, p in msgs if t == "D"]
        want = b"%08d" % i
        check(len(rows) == 1 and want in rows[0] and str(VALUE).encode() in rows[0],
              "unit %d answered %r" % (i, [(t, p[:40]) for t, p in msgs]))


def test_pipelined_binds_wait_for_a_busy_origin():
    pipeline_against_busy_origin(wire.query("SELECT count(*) FROM bp_t"), [big_unit(i) for i in range(UNITS)],
                                 lambda conn: read_units(conn, None))


def test_pinned_session_too():
    # A temporary table pins the session to its connection.
    setup = wire.query("CREATE TEMP TABLE bp_pin (v int)") + wire.query("SELECT count(*) FROM bp_t")

    def read(conn):
        check(conn.read_until("Z")[-1][0] == "Z", "temp table")
        read_units(conn, None)

    pipeline_against_busy_origin(setup, [big_unit(i) for i in range(UNITS)], read)


def test_copy_data_too():
    # COPY FROM STDIN into the locked table: its data waits like any message.
    row = b"x" * (VALUE - 1) + b"\n"
    copy = [wire.query("COPY bp_t (v) FROM STDIN")]
    copy += [wire.frame("d", row) for _ in range(UNITS)]
    copy += [wire.frame("c")]

    def read(conn):
        msgs = conn.read_until("Z")
        tags = "".join(t for t, _ in msgs)
        check("G" in tags and "C" in tags and "E" not in tags, "COPY answered %r" % (tags,))

    pipeline_against_busy_origin(b"", copy, read)
    with psycopg.connect(ORIGIN, autocommit=True) as c:
        n = c.execute("SELECT count(*) FROM bp_t").fetchone()[0]
        check(n == UNITS, "COPY stored %d rows" % n)


if __name__ == "__main__":
    ORIGIN = wire.origin_url(wire.pg_env())
    with psycopg.connect(ORIGIN, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS bp_t")
        c.execute("CREATE TABLE bp_t (v text)")
    with wire.Serve(["--pool-size", "2"]) as SERVE:
        wire.run([test_pipelined_binds_wait_for_a_busy_origin, test_pinned_session_too, test_copy_data_too])
