"""The Client's handshake against hostile or unlucky apps, over raw sockets,
through `hyperpool serve` (issue 10 items 4 and 5).

- An unknown user gets the whole SCRAM exchange and the same 28P01 as a wrong
  password, in about the same time (no user enumeration).
- An unknown database is reported after authentication only.
- A second StartupMessage during SCRAM fails at once with 08P01.
"""

import statistics
import struct
import sys
import time
import os

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wire  # noqa: E402
from wire import check  # noqa: E402

SERVE = None


def attempt(user, database, password):
    """One login attempt: (raw answer messages, seconds from StartupMessage to the error)."""
    conn = wire.Conn(SERVE.host, SERVE.port)
    try:
        start = time.monotonic()
        conn.send(wire.startup({"user": user, "database": database}))
        msgs = conn.scram(password)
        msgs += [] if msgs and msgs[-1][0] == "E" else conn.read_until("EZ")
        elapsed = time.monotonic() - start
        check(conn.closed_within(5), "the connection stayed open after %r" % (msgs[-1:],))
        return msgs, elapsed
    finally:
        conn.close()


def error_of(msgs):
    check(msgs and msgs[-1][0] == "E", "no ErrorResponse: %r" % (msgs,))
    return wire.error_fields(msgs[-1][1])


def test_unknown_user_looks_like_a_wrong_password():
    wrong, _ = attempt(SERVE.user, SERVE.database, "not-the-password")
    unknown, _ = attempt("mallory", SERVE.database, SERVE.password)
    # Both ran SCRAM: AuthenticationSASL (10) and SASLContinue (11) came first.
    for msgs in (wrong, unknown):
        kinds = [struct.unpack("!I", p[:4])[0] for t, p in msgs if t == "R"]
        check(kinds == [10, 11], "authentication messages %r" % (kinds,))
    e = error_of(unknown)
    check(e["C"] == "28P01", "unknown user got %r" % (e,))
    check(e["M"] == 'password authentication failed for user "mallory"', "message %r" % (e["M"],))
    # Identical bytes apart from the name.
    a = wrong[-1][1].replace(b'"%s"' % SERVE.user.encode(), b'"<user>"')
    b = unknown[-1][1].replace(b'"mallory"', b'"<user>"')
    check(a == b, "answers differ: %r vs %r" % (a, b))


def test_unknown_user_takes_as_long_as_a_wrong_password():
    # Interleaved in ABBA order, after three pairs: whatever else the freshly
    # started serve does meanwhile (its catalog read, the WAL feed's first
    # try) and the tests beside it on a 2-core machine fall on both kinds
    # alike (one after the other, the first kind measured slower now and
    # then: 3.7 against 1.2 ms).
    for _ in range(3):
        attempt(SERVE.user, SERVE.database, "nope")
        attempt("nobody", SERVE.database, "nope")
    wrong, unknown = [], []
    for i in range(12):
        for kind in (("wrong", "unknown") if i % 2 == 0 else ("unknown", "wrong")):
            if kind == "wrong":
                wrong.append(attempt(SERVE.user, SERVE.database, "nope")[1])
            else:
                unknown.append(attempt("nobody%d" % i, SERVE.database, "nope")[1])
    # The lower quartile of each: what an attempt costs, without the stalls
    # of a machine running other tests beside it, which only ever add time
    # and fell on one kind now and then (medians 1.4 against 2.8 ms, when
    # both kinds' fastest answers were 1.1 ms).
    qw, qu = sorted(wrong)[len(wrong) // 4], sorted(unknown)[len(unknown) // 4]
    print("  lower quartile: wrong password %.1f ms, unknown user %.1f ms (medians %.1f, %.1f)" %
          (qw * 1e3, qu * 1e3, statistics.median(wrong) * 1e3, statistics.median(unknown) * 1e3))
    check(qu >= 0.5 * qw, "unknown user answered in %.1f ms, wrong password in %.1f ms" % (qu * 1e3, qw * 1e3))


def test_unknown_database_with_wrong_password_is_28P01():
    msgs, _ = attempt(SERVE.user, "no_such_db", "nope")
    e = error_of(msgs)
    check(e["C"] == "28P01", "got %r" % (e,))
    check("no_such_db" not in e["M"], "the database was revealed: %r" % (e,))


def test_unknown_database_with_right_password_is_3D000_after_authentication():
    msgs, _ = attempt(SERVE.user, "no_such_db", SERVE.password)
    auth_ok = [m for m in msgs if m[0] == "R" and struct.unpack("!I", m[1][:4])[0] == 0]
    check(auth_ok, "no AuthenticationOk before the error: %r" % (msgs,))
    e = error_of(msgs)
    check(e["C"] == "3D000" and e["M"] == 'database "no_such_db" does not exist', "got %r" % (e,))


def test_second_startup_message_during_scram_fails_at_once():
    conn = wire.Conn(SERVE.host, SERVE.port)
    try:
        conn.send(wire.startup({"user": SERVE.user, "database": SERVE.database}))
        m = conn.read_msg()
        check(m and m[0] == "R", "no AuthenticationSASL: %r" % (m,))
        start = time.monotonic()
        conn.send(wire.startup({"user": SERVE.user, "database": SERVE.database}))
        m = conn.read_msg()
        elapsed = time.monotonic() - start
        check(m and m[0] == "E", "no ErrorResponse: %r" % (m,))
        e = wire.error_fields(m[1])
        check(e["C"] == "08P01" and e["M"] == "expected SASL response, got message type 0", "got %r" % (e,))
        check(elapsed < 2.0, "took %.1f s (the login timeout?)" % elapsed)
        check(conn.closed_within(5), "not closed after the error")
    finally:
        conn.close()


def test_non_p_tag_during_scram_fails_from_the_tag_byte_alone():
    conn = wire.Conn(SERVE.host, SERVE.port)
    try:
        conn.send(wire.startup({"user": SERVE.user, "database": SERVE.database}))
        check(conn.read_msg()[0] == "R", "no AuthenticationSASL")
        conn.send(b"Q")  # one byte: no length yet
        m = conn.read_msg()
        check(m and m[0] == "E" and wire.error_fields(m[1])["C"] == "08P01", "got %r" % (m,))
    finally:
        conn.close()


if __name__ == "__main__":
    with wire.Serve() as SERVE:
        wire.run([
            test_unknown_user_looks_like_a_wrong_password,
            test_unknown_user_takes_as_long_as_a_wrong_password,
            test_unknown_database_with_wrong_password_is_28P01,
            test_unknown_database_with_right_password_is_3D000_after_authentication,
            test_second_startup_message_during_scram_fails_at_once,
            test_non_p_tag_during_scram_fails_from_the_tag_byte_alone,
        ])
