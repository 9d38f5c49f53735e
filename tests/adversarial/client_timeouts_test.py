"""Client-side timeouts and quick disconnects, over raw sockets, through
`hyperpool serve` (issue 10 item 12, client side; issue 15 item 4).

- --client-login-timeout closes an app that does not log in in time,
  without a message (as PostgreSQL's authentication_timeout).
- --client-idle-timeout ends a session idle outside a transaction with
  FATAL 57P05 (as PostgreSQL's idle_session_timeout), never one inside a
  transaction.
- Terminate before the startup packet (node-postgres), or EOF inside the
  startup packet, closes silently, as PostgreSQL 15 does.
"""

import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wire  # noqa: E402
from wire import check  # noqa: E402

SERVE = None


def test_login_timeout_closes_silently():
    conn = wire.Conn(SERVE.host, SERVE.port)
    try:
        start = time.monotonic()
        conn.sock.settimeout(5)
        data = b""
        try:
            while True:
                chunk = conn.sock.recv(100)
                if not chunk:
                    break
                data += chunk
        except (ConnectionResetError, socket.timeout):
            pass
        elapsed = time.monotonic() - start
        check(data == b"", "got bytes %r" % (data,))
        check(0.8 <= elapsed < 4.0, "closed after %.2f s, expected about 1 s" % elapsed)
    finally:
        conn.close()


def test_login_timeout_during_scram():
    conn = wire.Conn(SERVE.host, SERVE.port)
    try:
        conn.send(wire.startup({"user": SERVE.user, "database": SERVE.database}))
        check(conn.read_msg()[0] == "R", "no AuthenticationSASL")
        check(conn.closed_within(4), "not closed by the login timeout")
    finally:
        conn.close()


def test_idle_session_gets_57P05():
    conn = wire.Conn(SERVE.host, SERVE.port)
    try:
        conn.login(SERVE.user, SERVE.password, SERVE.database)
        conn.send(wire.query("SELECT 1"))
        check(conn.read_until("Z")[-1][0] == "Z", "query failed")
        start = time.monotonic()
        m = conn.read_msg()
        elapsed = time.monotonic() - start
        check(m and m[0] == "E", "expected an ErrorResponse, got %r" % (m,))
        e = wire.error_fields(m[1])
        check(e["S"] == "FATAL" and e["C"] == "57P05", "got %r" % (e,))
        check(e["M"] == "terminating connection due to idle-session timeout", "message %r" % (e["M"],))
        check(0.8 <= elapsed < 4.0, "after %.2f s, expected about 1 s" % elapsed)
        check(conn.closed_within(5), "not closed after 57P05")
    finally:
        conn.close()


def test_idle_session_without_any_query_gets_57P05():
    conn = wire.Conn(SERVE.host, SERVE.port)
    try:
        conn.login(SERVE.user, SERVE.password, SERVE.database)
        m = conn.read_msg()
        check(m and m[0] == "E" and wire.error_fields(m[1])["C"] == "57P05", "got %r" % (m,))
    finally:
        conn.close()


def test_idle_in_transaction_is_not_the_idle_session_timeout():
    conn = wire.Conn(SERVE.host, SERVE.port)
    try:
        conn.login(SERVE.user, SERVE.password, SERVE.database)
        conn.send(wire.query("BEGIN"))
        z = conn.read_until("Z")[-1]
        check(z == ("Z", b"T"), "BEGIN gave %r" % (z,))
        # Three idle-timeout periods inside the transaction: nothing arrives.
        conn.sock.settimeout(3.0)
        try:
            got = conn.sock.recv(100)
            check(False, "received %r inside a transaction" % (got,))
        except socket.timeout:
            pass
        conn.sock.settimeout(10.0)
        conn.send(wire.query("COMMIT"))
        z = conn.read_until("Z")[-1]
        check(z == ("Z", b"I"), "COMMIT gave %r" % (z,))
        m = conn.read_msg()  # idle outside a transaction now: the timeout applies again
        check(m and m[0] == "E" and wire.error_fields(m[1])["C"] == "57P05", "got %r" % (m,))
    finally:
        conn.close()


def test_activity_keeps_a_session_alive():
    conn = wire.Conn(SERVE.host, SERVE.port)
    try:
        conn.login(SERVE.user, SERVE.password, SERVE.database)
        deadline = time.monotonic() + 2.5  # longer than the 1 s timeout in total
        while time.monotonic() < deadline:
            conn.send(wire.query("SELECT 1"))
            last = conn.read_until("ZE")[-1]
            check(last[0] == "Z", "a busy session got %r" % (last,))
            time.sleep(0.3)  # pacing the app's queries, not waiting for a result
    finally:
        conn.close()


def test_terminate_before_startup_closes_silently():
    conn = wire.Conn(SERVE.host, SERVE.port)
    try:
        conn.send(b"X\0\0\0\x04")
        data = conn.read_exact(1)
        check(data is None, "got %r" % (data,))
    finally:
        conn.close()


def test_eof_inside_the_startup_packet_closes_silently():
    conn = wire.Conn(SERVE.host, SERVE.port)
    try:
        conn.send(wire.startup({"user": SERVE.user})[:6])
        conn.sock.shutdown(socket.SHUT_WR)
        data = conn.read_exact(1)
        check(data is None, "got %r" % (data,))
    finally:
        conn.close()


def test_serve_survives_and_still_serves():
    conn = wire.Conn(SERVE.host, SERVE.port)
    try:
        conn.login(SERVE.user, SERVE.password, SERVE.database)
        conn.send(wire.query("SELECT 40 + 2"))
        rows = [p for t, p in conn.read_until("Z") if t == "D"]
        check(rows and rows[0].endswith(b"42"), "rows %r" % (rows,))
    finally:
        conn.close()
    check(SERVE.proc.poll() is None, "serve exited")


if __name__ == "__main__":
    with wire.Serve(["--client-login-timeout", "1", "--client-idle-timeout", "1"]) as SERVE:
        wire.run([
            test_login_timeout_closes_silently,
            test_login_timeout_during_scram,
            test_idle_session_gets_57P05,
            test_idle_session_without_any_query_gets_57P05,
            test_idle_in_transaction_is_not_the_idle_session_timeout,
            test_activity_keeps_a_session_alive,
            test_terminate_before_startup_closes_silently,
            test_eof_inside_the_startup_packet_closes_silently,
            test_serve_survives_and_still_serves,
        ])
