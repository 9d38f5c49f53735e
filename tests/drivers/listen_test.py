#!/usr/bin/env python3
"""LISTEN/NOTIFY with idle listeners (issue 15 item 1), psycopg 3 and asyncpg.

psycopg: LISTENERS autocommit connections run LISTEN and then sit idle; a
sender NOTIFYs; each listener waits on its socket (select with a deadline,
sending nothing) and must get every notification exactly once, in order.
asyncpg: the same with Connection.add_listener(), then remove_listener()
must stop delivery. Through hyperpool's pool of 2 this needs LISTEN without
pinning and notifications pushed to idle sessions. Runs direct and through
hyperpool (drivers_test.sh DRIVERS=python_listen).

usage: listen_test.py URL
"""
import asyncio
import select
import sys
import time

import asyncpg
import psycopg

from drvcommon import Report

DRIVER = "python_listen"
LISTENERS = 4
NOTIFIES = 3
WAIT_S = 15.0


def wait_notifies(conn, want, deadline):
    """Reads conn's notifications while idle until `want` have come or the deadline."""
    got = []
    pg = conn.pgconn
    while True:
        while True:  # what libpq has already read
            n = pg.notifies()
            if n is None:
                break
            got.append((n.relname.decode(), n.extra.decode()))
        left = deadline - time.monotonic()
        if len(got) >= want or left <= 0:
            return got
        ready, _, _ = select.select([conn.fileno()], [], [], left)
        if not ready:
            return got
        pg.consume_input()


def psycopg_part(url, rep):
    listeners = [psycopg.connect(url, autocommit=True) for _ in range(LISTENERS)]
    for c in listeners:
        c.execute("LISTEN drv_py_chan")
    sender = psycopg.connect(url, autocommit=True)
    for k in range(NOTIFIES):
        sender.execute("SELECT pg_notify('drv_py_chan', %s)", (f"m{k}",))
    want = [("drv_py_chan", f"m{k}") for k in range(NOTIFIES)]
    deadline = time.monotonic() + WAIT_S
    results = [wait_notifies(c, NOTIFIES, deadline) for c in listeners]
    rep.check(all(r == want for r in results), f"psycopg: {LISTENERS} idle listeners got each NOTIFY once, in order",
              "; ".join(f"#{i}: {r}" for i, r in enumerate(results)))
    # Nothing more (a duplicate would come before this fence).
    sender.execute("NOTIFY drv_py_chan, 'fence'")
    deadline = time.monotonic() + WAIT_S
    fences = [wait_notifies(c, 1, deadline) for c in listeners]
    rep.check(all(f == [("drv_py_chan", "fence")] for f in fences), "psycopg: no duplicates", str(fences))
    for c in listeners + [sender]:
        c.close()


async def asyncpg_part(url, rep):
    got = []
    event = asyncio.Event()

    def on_note(_conn, _pid, channel, payload):
        got.append((channel, payload))
        event.set()

    async def until(pred):
        deadline = time.monotonic() + WAIT_S
        while not pred() and time.monotonic() < deadline:
            event.clear()
            try:
                await asyncio.wait_for(event.wait(), deadline - time.monotonic())
            except asyncio.TimeoutError:
                break
        return pred()

    listener = await asyncpg.connect(url)
    await listener.add_listener("drv_apg_chan", on_note)
    await listener.add_listener("drv_apg_marker", on_note)
    sender = await asyncpg.connect(url)
    await sender.execute("NOTIFY drv_apg_chan, 'one'")
    ok = await until(lambda: len(got) >= 1)
    rep.check(ok and got == [("drv_apg_chan", "one")], "asyncpg: add_listener() gets a NOTIFY while idle", str(got))
    await listener.remove_listener("drv_apg_chan", on_note)
    await sender.execute("NOTIFY drv_apg_chan, 'after remove'")
    await sender.execute("NOTIFY drv_apg_marker, 'fence'")
    ok = await until(lambda: ("drv_apg_marker", "fence") in got)
    rep.check(ok and got == [("drv_apg_chan", "one"), ("drv_apg_marker", "fence")],
              "asyncpg: remove_listener() (UNLISTEN) stops delivery", str(got))
    await listener.close()
    await sender.close()


def main():
    url = sys.argv[1]
    rep = Report(DRIVER)
    try:
        psycopg_part(url, rep)
    except Exception as e:  # noqa: BLE001 - reported, counted as an error
        rep.error("psycopg", e)
    try:
        asyncio.run(asyncpg_part(url, rep))
    except Exception as e:  # noqa: BLE001
        rep.error("asyncpg", e)
    rep.finish()


if __name__ == "__main__":
    main()
