"""Floods of silent and slow connections through `hyperpool serve`
(issue 10, adversarial suite): many connections that never speak, and
slowloris ones that dribble a startup packet, must neither stop a real app
from logging in nor hold memory beyond a small per-connection bound, and
must all be closed by the login timeout (absolute from accept, not reset by
each byte). The pool is whole afterwards: fresh sessions get right answers.
"""

import os
import select
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wire  # noqa: E402
from wire import check  # noqa: E402

SERVE = None
SILENT = 1500
SLOW = 200
LOGIN_TIMEOUT_S = 2


def open_many(n):
    socks = []
    for _ in range(n):
        s = socket.create_connection((SERVE.host, SERVE.port), timeout=10)
        s.setblocking(False)
        socks.append(s)
    return socks


def wait_all_closed(socks, seconds):
    """How many of `socks` are still open after the peer had `seconds` to close them."""
    by_fd = {s.fileno(): s for s in socks if s.fileno() >= 0}
    poller = select.poll()  # select() cannot take descriptors above 1023
    for fd in by_fd:
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    deadline = time.monotonic() + seconds
    while by_fd and time.monotonic() < deadline:
        for fd, _ in poller.poll(200):
            s = by_fd.get(fd)
            if s is None:
                continue
            try:
                data = s.recv(4096)
            except (ConnectionResetError, BlockingIOError):
                data = b"" if not isinstance(sys.exc_info()[1], BlockingIOError) else None
            if data == b"":
                poller.unregister(fd)
                del by_fd[fd]
    return len(by_fd)


def query_ok(sql="SELECT 40 + 2"):
    conn = wire.Conn(SERVE.host, SERVE.port)
    try:
        conn.login(SERVE.user, SERVE.password, SERVE.database)
        conn.send(wire.query(sql))
        msgs = conn.read_until("ZE")
        rows = [m for m in msgs if m[0] == "D"]
        check(msgs and msgs[-1][0] == "Z" and rows, "query failed: %r" % (msgs[-2:],))
        return rows[0][1]
    finally:
        conn.close()


def test_silent_flood_does_not_block_logins_and_is_closed():
    baseline = wire.rss_kib(SERVE.proc.pid)
    socks = open_many(SILENT)
    try:
        start = time.monotonic()
        query_ok()
        check(time.monotonic() - start < 2.0, "a login behind %d silent connections took %.2f s"
              % (SILENT, time.monotonic() - start))
        grown = wire.rss_kib(SERVE.proc.pid) - baseline
        check(grown < SILENT * 64, "%d silent connections grew RSS by %d KiB (> 64 KiB each)" % (SILENT, grown))
        left = wait_all_closed(socks, LOGIN_TIMEOUT_S + 4)
        check(left == 0, "%d of %d silent connections still open after the login timeout" % (left, SILENT))
    finally:
        for s in socks:
            s.close()


def test_slowloris_startup_is_closed_by_the_absolute_login_timeout():
    packet = wire.startup({"user": SERVE.user, "database": SERVE.database})
    socks = open_many(SLOW)
    try:
        start = time.monotonic()
        sent = 0
        # One byte per connection every 0.25 s: progress never completes a
        # packet before the login timeout.
        while time.monotonic() - start < LOGIN_TIMEOUT_S + 4 and sent < len(packet) - 1:
            for s in socks:
                try:
                    s.send(packet[sent:sent + 1])
                except (BrokenPipeError, ConnectionResetError, BlockingIOError):
                    pass
            sent += 1
            open_left = wait_all_closed(socks, 0.25)
            if open_left == 0:
                break
        left = wait_all_closed(socks, max(0.0, LOGIN_TIMEOUT_S + 4 - (time.monotonic() - start)))
        check(left == 0, "%d of %d slow connections outlived the login timeout" % (left, SLOW))
        check(time.monotonic() - start >= LOGIN_TIMEOUT_S * 0.8, "closed before the login timeout")
    finally:
        for s in socks:
            s.close()


def test_sessions_are_right_after_the_floods():
    for i in range(20):
        row = query_ok("SELECT current_user, %d" % i)
        check(row.endswith(str(i).encode()), "session %d got %r" % (i, row))


def main():
    global SERVE
    with wire.Serve(["--client-login-timeout", str(LOGIN_TIMEOUT_S), "--pool-size", "2"]) as SERVE:
        wire.run([
            test_silent_flood_does_not_block_logins_and_is_closed,
            test_slowloris_startup_is_closed_by_the_absolute_login_timeout,
            test_sessions_are_right_after_the_floods,
        ])


if __name__ == "__main__":
    main()
