#!/usr/bin/python3
"""A notification carries the pid its sender's driver holds, also when the
sender closes right after its NOTIFY (psycopg's own test_notifies does
exactly that): through `hyperpool serve` (defaults, cache on, pool 2) the
listener's copy of the last NOTIFY may arrive after the sender's session
ended, and must still name the sender's pid (its BackendKeyData pid), not
the origin backend's (src/endpoint/notification_pid.h, kKeepAfterEnd).

Needs HYPERPOOL_BINARY and HYPERPOOL_TEST_PG_ENV (ctest sets both).
"""
import select
import time

import psycopg

from pgtest_env import check, fail, origin_url, start_serve, stop_serve  # beside this script

ROUNDS = 20

proc, url = start_serve(["--origin", origin_url(), "--pool-size", "2"])
try:
    with psycopg.connect(url, autocommit=True) as listener:
        received = []
        listener.add_notify_handler(received.append)
        listener.execute("LISTEN notify_pid_test")
        wrong = []
        for i in range(ROUNDS):
            sender = psycopg.connect(url, autocommit=True)
            pid = sender.info.backend_pid
            sender.execute(f"NOTIFY notify_pid_test, '{i}'")
            sender.close()  # at once, as psycopg's test_notifies
            deadline = time.monotonic() + 10
            while not received and time.monotonic() < deadline:
                select.select([listener.fileno()], [], [], 0.5)
                listener.execute("SELECT 1")  # reads what arrived; the handler gets the notifications
            if not received:
                fail(f"round {i}: no notification within 10 s")
            got = received.pop(0)
            check(got.payload == str(i), f"round {i}: the notification's payload")
            if got.pid != pid:
                wrong.append((i, got.pid, pid))
        check(not wrong, f"every notification names its sender's pid, also after the sender closed (wrong: {wrong})")
    print("PASS")
finally:
    stop_serve(proc)
