#!/usr/bin/python3
"""Idle sessions whose core sleeps (issue 26: nothing held while idle),
asyncpg through `hyperpool serve` with its defaults (cache on):

- 30 clients run a query that reaches the origin, one of them after
  `SET work_mem` and the others after `SET application_name` (so that
  their Endpoint halves are not let go instead), and go idle: hyperpool_sleeping_sessions reaches 30 (the
  idle sweep gave their cores back; the gauge is missing, so this fails,
  without dormancy);
- a sleeping session wakes for its next query: its setting is still its
  own (SHOW work_mem), and every other one answers; a SET made just before
  the sleep (TimeZone, extra_float_digits) still shapes its answers:
  another session's cached rendering is not served to it;
- pg_cancel_backend of a sleeping session's pid answers t, and the session
  goes on; pg_terminate_backend of another one answers t and ends it with
  57P01, as PostgreSQL ends an idle backend;
- a session holding a prepared statement (asyncpg's fetchval) is not put
  to sleep with it lost: it runs its statement again after the sweep.

Needs HYPERPOOL_BINARY and HYPERPOOL_TEST_PG_ENV (ctest sets both).
"""
import asyncio

import asyncpg

from pgtest_env import check, fail, fetch_metrics, origin_url, run_serve_with_metrics, wait_for

N = 30


def sleeping(murl):
    return fetch_metrics(murl).get("hyperpool_sleeping_sessions", -1)


async def main(url, murl):
    conns = [await asyncpg.connect(dsn=url, ssl=False, timeout=30, statement_cache_size=0) for _ in range(N)]
    await conns[0].execute("SET work_mem = '7MB'")
    # A setting of their own each: asleep, not let go (released_links_test
    # covers sessions whose Endpoint half holds nothing of theirs).
    await asyncio.gather(*(c.execute("SET application_name = 'sleeper'") for c in conns[1:]))
    # Simple Queries that reach the origin (now() is not cached): no
    # statement is left in the sessions.
    await asyncio.gather(*(c.execute("SELECT now()") for c in conns))
    await asyncio.to_thread(wait_for, lambda: sleeping(murl) >= N, f"{N} idle sessions asleep", 20)
    check(True, f"{N} idle sessions asleep (hyperpool_sleeping_sessions {sleeping(murl)})")

    # The first query after the sweep wakes the session, with its own settings.
    got = await conns[0].fetchval("SHOW work_mem")
    check(got == "7MB", f"a woken session keeps its SET work_mem (got {got})")
    for i, c in enumerate(conns[1:4], start=1):
        got = await c.fetchval("SELECT $1::int", i)
        if got != i:
            fail(f"client {i}: a woken session answers")
    check(True, "woken sessions answer")

    # A SET before the sleep still keys the cache by the session's own
    # settings after it wakes: another session's cached answer (the startup
    # TimeZone's rendering) is not served to it.
    for setting, q, want in (("TimeZone = 'Asia/Tokyo'", "SELECT '2020-01-01 00:00+00'::timestamptz::text",
                              "2020-01-01 09:00:00+09"),
                             ("extra_float_digits = 0", "SELECT (0.1::float8 + 0.2::float8)::text", "0.3")):
        base = await conns[2].fetchval(q)
        await conns[2].fetchval(q)  # (stored by now)
        c = await asyncpg.connect(dsn=url, ssl=False, timeout=30, statement_cache_size=0)
        before = sleeping(murl)
        # Asleep right after the SET's capture, before any unit re-keyed it.
        await c.execute("SET " + setting)
        await asyncio.to_thread(wait_for, lambda: sleeping(murl) > before, "the SET session asleep", 20)
        got = await c.fetchval(q)
        check(got == want, f"a woken session's SET {setting} keys its cache look-ups "
                           f"(got {got}; the startup setting's answer is {base})")
        await c.close()

    # Signals aimed at sleeping sessions: as PostgreSQL answers for idle backends.
    await asyncio.to_thread(wait_for, lambda: sleeping(murl) >= N - 5, "the others still asleep", 20)  # (0-3 and 20 hold an unnamed statement now)
    caller = conns[1]
    cancel_pid = conns[10].get_server_pid()
    got = await caller.fetchval(f"SELECT pg_cancel_backend({cancel_pid})")
    check(got is True, f"pg_cancel_backend of a sleeping session answers t (got {got})")
    got = await conns[10].fetchval("SELECT 10")
    check(got == 10, "the cancelled idle session goes on")
    term_pid = conns[11].get_server_pid()
    got = await caller.fetchval(f"SELECT pg_terminate_backend({term_pid})")
    check(got is True, f"pg_terminate_backend of a sleeping session answers t (got {got})")
    try:
        await conns[11].fetchval("SELECT 11")
        fail("a terminated sleeping session still answers")
    except (asyncpg.exceptions.AdminShutdownError, asyncpg.exceptions.ConnectionDoesNotExistError,
            asyncpg.exceptions.InterfaceError, ConnectionError) as e:  # (InterfaceError: the FATAL came first)
        check(True, f"the terminated sleeping session ended ({type(e).__name__})")

    # A session with a prepared statement keeps it across the sweep.
    stmt_conn = await asyncpg.connect(dsn=url, ssl=False, timeout=30)  # asyncpg's statement cache: named statements
    got = await stmt_conn.fetchval("SELECT $1::int + 1", 1)
    before = sleeping(murl)
    await conns[12].execute("SELECT now()")  # another session goes idle after it: the sweep has run once it sleeps
    await asyncio.to_thread(wait_for, lambda: sleeping(murl) >= before, "the sweep after the prepared statement", 20)
    got = await stmt_conn.fetchval("SELECT $1::int + 1", 2)
    check(got == 3, "a session's prepared statement answers after the sweep")

    for i, c in enumerate(conns):
        if i == 11:
            continue
        got = await c.fetchval("SELECT $1::int", i)
        if got != i:
            fail(f"client {i}: answers at the end")
    check(True, "every session answers at the end")
    await asyncio.gather(*(c.close() for i, c in enumerate(conns) if i != 11))
    await stmt_conn.close()


run_serve_with_metrics(["--origin", origin_url(), "--pool-size", "2"], main)
