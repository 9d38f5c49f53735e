"""Memory the Client spends on what apps declare and send, measured as the
VmRSS of a `hyperpool serve` process (issue 10 items 2 and 3).

- A header declaring a huge message costs nothing until the bytes arrive;
  above --max-message-size it is refused with FATAL 54000 at once.
- After three sessions send 50 MB queries and leave, the process returns
  close to its baseline.
"""

import os
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wire  # noqa: E402
from wire import check  # noqa: E402

MIB = 1024
SERVE = None


def login():
    conn = wire.Conn(SERVE.host, SERVE.port, timeout=60)
    conn.login(SERVE.user, SERVE.password, SERVE.database)
    return conn


def settle_rss(seconds=1.0):
    """The highest RSS seen while polling for `seconds` (catches a transient spike)."""
    peak = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        peak = max(peak, wire.rss_kib(SERVE.proc.pid))
        time.sleep(0.05)
    return peak


def test_declared_length_is_not_allocated():
    conn = login()
    try:
        base = wire.rss_kib(SERVE.proc.pid)
        # 60 MB declared (under the 64 MiB default), 100 bytes sent, then idle.
        conn.send(b"Q" + struct.pack("!I", 60 * 1024 * 1024) + b"S" * 100)
        peak = settle_rss(1.5)
        print("  baseline %d MiB, peak while idle %d MiB" % (base // MIB, peak // MIB))
        check(peak - base < 20 * MIB, "RSS grew by %d MiB for a 100-byte prefix" % ((peak - base) // MIB))
    finally:
        conn.close()


def test_message_above_the_limit_is_refused_with_54000():
    conn = login()
    try:
        base = wire.rss_kib(SERVE.proc.pid)
        conn.send(b"Q" + struct.pack("!I", 10 ** 9))  # 1 GB from a 5-byte header
        m = conn.read_msg()
        check(m and m[0] == "E", "expected an ErrorResponse, got %r" % (m,))
        e = wire.error_fields(m[1])
        check(e["S"] == "FATAL" and e["C"] == "54000", "got %r" % (e,))
        check(conn.closed_within(5), "not closed after 54000")
        grown = wire.rss_kib(SERVE.proc.pid) - base
        check(grown < 20 * MIB, "RSS grew by %d MiB" % (grown // MIB))
    finally:
        conn.close()


def big_query(results, index):
    try:
        conn = login()
        payload = "x" * (50 * 1024 * 1024)
        conn.send(wire.query("SELECT length('%s')" % payload))
        msgs = conn.read_until("Z")
        rows = [p for t, p in msgs if t == "D"]
        results[index] = rows[0].endswith(str(len(payload)).encode()) if rows else msgs
        conn.send(wire.terminate())
        conn.closed_within(10)
        conn.close()
    except Exception as e:  # noqa: BLE001 - reported by the caller
        results[index] = e


def test_memory_returns_after_three_50mb_queries():
    conn = login()  # the first session warms up the process (links, pool)
    conn.send(wire.query("SELECT 1"))
    conn.read_until("Z")
    conn.send(wire.terminate())
    conn.close()
    base = settle_rss(0.5)
    results = [None] * 3
    threads = [threading.Thread(target=big_query, args=(results, i)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    check(all(r is True for r in results), "queries failed: %r" % ([str(r)[:200] for r in results],))
    after = wire.wait_until(lambda: (lambda r: r if r - base < 30 * MIB else None)(wire.rss_kib(SERVE.proc.pid)), 10)
    final = wire.rss_kib(SERVE.proc.pid)
    print("  baseline %d MiB, after the sessions closed %d MiB" % (base // MIB, final // MIB))
    check(after is not None, "RSS stayed at %d MiB (baseline %d MiB)" % (final // MIB, base // MIB))


def test_an_open_idle_session_gives_back_a_large_message():
    base = settle_rss(0.5)
    conn = login()
    try:
        payload = "y" * (50 * 1024 * 1024)
        conn.send(wire.query("SELECT length('%s')" % payload))
        check(conn.read_until("Z")[-1][0] == "Z", "query failed")
        # The session stays open and idle: its buffers must not keep 50 MB.
        after = wire.wait_until(
            lambda: (lambda r: r if r - base < 30 * MIB else None)(wire.rss_kib(SERVE.proc.pid)), 10)
        final = wire.rss_kib(SERVE.proc.pid)
        print("  baseline %d MiB, idle session after a 50 MB query %d MiB" % (base // MIB, final // MIB))
        check(after is not None, "RSS stayed at %d MiB (baseline %d MiB)" % (final // MIB, base // MIB))
    finally:
        conn.close()


def test_max_message_size_flag():
    with wire.Serve(["--max-message-size", "1M"]) as small:
        conn = wire.Conn(small.host, small.port)
        try:
            conn.login(small.user, small.password, small.database)
            conn.send(wire.query("SELECT length('%s')" % ("z" * (900 * 1024))))
            rows = [p for t, p in conn.read_until("Z") if t == "D"]
            check(rows and rows[0].endswith(str(900 * 1024).encode()), "a 900 KiB query failed: %r" % (rows,))
            conn.send(b"Q" + struct.pack("!I", 2 * 1024 * 1024))
            m = conn.read_msg()
            check(m and m[0] == "E" and wire.error_fields(m[1])["C"] == "54000", "a 2 MiB header got %r" % (m,))
            check(conn.closed_within(5), "not closed after 54000")
        finally:
            conn.close()


if __name__ == "__main__":
    with wire.Serve(["--threads", "2"]) as SERVE:
        wire.run([
            test_declared_length_is_not_allocated,
            test_message_above_the_limit_is_refused_with_54000,
            test_memory_returns_after_three_50mb_queries,
            test_an_open_idle_session_gives_back_a_large_message,
            test_max_message_size_flag,
        ])
