"""One writer to the app (issue 26, item 4): a Client-tier cache hit and the
link's bytes for the same app leave in the order the app asked for them,
also when the app reads slowly (the socket is full, the link's answer waits
in the session's outbox) and many apps do this at once.

Each app pipelines, without reading: a large volatile result (never cached:
it goes through the link and fills the socket), then `SELECT 1` (cached: a
local hit once nothing is outstanding), several rounds in one write and
round by round; then it reads slowly, in small pieces, and checks every
answer in order. With the hit answered while the large result is still
being written, a second writer would interleave its bytes inside the result
(a malformed stream) or put the hit first.
"""

import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wire  # noqa: E402
from wire import check  # noqa: E402

APPS = 12
ROUNDS = 5
BIG = 4 * 1024 * 1024  # bytes of the volatile result: far more than a socket buffer
SERVE = None

BIG_SQL = "SELECT repeat(md5(random()::text), %d) AS big" % (BIG // 32)
HIT_SQL = "SELECT 1 AS hit"


class SlowConn(wire.Conn):
    """Reads in small pieces, so the server's writes to it stay partial."""

    def _fill(self):
        try:
            chunk = self.sock.recv(8192)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            return False
        self.buf += chunk
        return True


def expect_big(conn, what):
    msgs = conn.read_until("ZE")
    tags = "".join(t for t, _ in msgs)
    check(tags == "TDCZ", "%s: big result answered %r" % (what, tags))
    row = msgs[1][1]
    check(len(row) == 2 + 4 + BIG, "%s: big row of %d bytes" % (what, len(row)))


def expect_hit(conn, what):
    msgs = conn.read_until("ZE")
    tags = "".join(t for t, _ in msgs)
    check(tags == "TDCZ", "%s: SELECT 1 answered %r" % (what, tags))
    check(msgs[1][1] == b"\0\x01\0\0\0\x011", "%s: SELECT 1 row %r" % (what, msgs[1][1]))


def one_app(index, errors):
    conn = SlowConn(SERVE.host, SERVE.port, timeout=60.0)
    try:
        conn.login(SERVE.user, SERVE.password, SERVE.database)
        for _ in range(2):  # the second is answered by the Client tier
            conn.send(wire.query(HIT_SQL))
            expect_hit(conn, "app %d warm-up" % index)
        # All rounds in one write: each hit comes right after a big result.
        conn.send(b"".join(wire.query(BIG_SQL) + wire.query(HIT_SQL) for _ in range(ROUNDS)))
        for r in range(ROUNDS):
            expect_big(conn, "app %d pipelined round %d" % (index, r))
            expect_hit(conn, "app %d pipelined round %d" % (index, r))
        # Round by round: the hit is sent once the big result has started to
        # arrive (its ReadyForQuery may have reached the Client already
        # while its bytes still wait to be written).
        for r in range(ROUNDS):
            conn.send(wire.query(BIG_SQL))
            first = conn.read_exact(5)
            check(first is not None and first[:1] == b"T", "app %d round %d: first bytes %r" % (index, r, first))
            conn.buf = first + conn.buf
            conn.send(wire.query(HIT_SQL))
            expect_big(conn, "app %d round %d" % (index, r))
            expect_hit(conn, "app %d round %d" % (index, r))
        conn.send(wire.terminate())
    except Exception as e:  # noqa: BLE001 - reported by the test
        errors.append("app %d: %s: %s" % (index, type(e).__name__, e))
    finally:
        conn.close()


def test_hits_and_link_bytes_keep_their_order():
    errors = []
    threads = [threading.Thread(target=one_app, args=(i, errors), daemon=True) for i in range(APPS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    check(not any(t.is_alive() for t in threads), "apps still running after 120 s")
    check(not errors, "; ".join(errors[:4]))
    check(SERVE.proc.poll() is None, "serve exited: %s" % SERVE.stderr_text()[-2000:])


if __name__ == "__main__":
    with wire.Serve(["--pool-size", "4"]) as SERVE:
        wire.run([test_hits_and_link_bytes_keep_their_order])
