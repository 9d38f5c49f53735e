#!/usr/bin/python3
"""A notification carries the pid its sender's driver holds, also when the
sender closes right after its NOTIFY (psycopg's own test_notifies does
exactly that): through `hyperpool serve` (defaults, cache on, pool 2) the
listener's copy of the last NOTIFY may arrive after the sender's session
ended, and must still name the sender's pid (its BackendKeyData pid), not
the origin backend's (src/endpoint/notification_pid.h, kKeepAfterEnd).

Part 2: three notifier sessions at once over a pool of 3 share the origin
backends, each sending on its own channel, as NOTIFY and as a prepared
pg_notify inside a transaction block (psycopg runs it by Bind alone once it
has prepared it). The listener connection's copies were translated by who
held the backend last: one read after the next notifying session took the
backend named that session (~10% of them), and a prepared pg_notify, run
without its Parse, was not known to notify at all.

Needs HYPERPOOL_BINARY and HYPERPOOL_TEST_PG_ENV (ctest sets both).
"""
import select
import threading
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

    # Part 2: concurrent notifiers over shared backends.
    channels = ["notify_pid_a", "notify_pid_b", "notify_pid_c"]
    per_channel = 150
    with psycopg.connect(url, autocommit=True) as listener:
        got = []
        listener.add_notify_handler(got.append)
        for ch in channels:
            listener.execute(f"LISTEN {ch}")
        senders = {}
        errors = []

        def notifier(ch):
            try:
                with psycopg.connect(url, autocommit=True) as c:
                    senders[ch] = c.info.backend_pid
                    for k in range(per_channel):
                        if k % 3 == 0:
                            with c.transaction():
                                c.execute("SELECT pg_notify(%s, %s)", (ch, f"{ch}:{k}"))
                        else:
                            c.execute(f"NOTIFY {ch}, '{ch}:{k}'")
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(f"{ch}: {type(e).__name__}: {e}")

        threads = [threading.Thread(target=notifier, args=(ch,)) for ch in channels]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        check(not errors, f"the notifiers ran: {errors}")
        deadline = time.monotonic() + 20
        while len(got) < per_channel * len(channels) and time.monotonic() < deadline:
            select.select([listener.fileno()], [], [], 0.2)
            listener.execute("SELECT 1")
        check(len(got) == per_channel * len(channels), f"every notification arrived ({len(got)})")
        for ch in channels:
            payloads = [n.payload for n in got if n.channel == ch]
            check(payloads == [f"{ch}:{k}" for k in range(per_channel)], f"{ch}: all, in order")
        misnamed = [(n.channel, n.payload, n.pid) for n in got if n.pid != senders[n.channel]]
        check(not misnamed, f"{len(misnamed)} of {len(got)} notifications named another session "
              f"(senders {senders}; first {misnamed[:3]})")
    print("PASS")
finally:
    stop_serve(proc)
