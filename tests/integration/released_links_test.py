#!/usr/bin/python3
"""Idle sessions that let their link and their Endpoint half go (issue 26:
nothing held while idle but what the session needs), asyncpg through
`hyperpool serve` with its defaults (cache on), a pool of 2:

- 20 clients run a simple Query that reaches the origin and go idle: the
  Endpoint offers each to let its half go, every Client session takes it
  (hyperpool_client_links_released_total reaches 20) and the Endpoint has
  no session left (hyperpool_endpoint_sessions 0). Before this, a session
  kept both until it left, so this fails there;
- each of them answers its next query (a new link, a new Endpoint half),
  and a write made by one is read by another, not a cached row from
  before it;
- sessions whose Endpoint half holds something of theirs keep it across
  the sweeps: a SET, a named prepared statement, a LISTEN (a NOTIFY sent
  after the sweep arrives), a temporary table, a pid shown by
  pg_backend_pid() (a session that used a sequence keeps its half too; its
  currval is not kept across other sessions' use of the pool either way:
  docs/architecture.md);
- signals aimed at a released session are answered as PostgreSQL answers
  for an idle backend: pg_cancel_backend t and it goes on,
  pg_terminate_backend t and it ends;
- a released session's next query can be cancelled (the cancel key names
  its new link's Endpoint half);
- a Bind of the unnamed statement after a simple Query fails with 26000
  "unnamed prepared statement does not exist", as directly (it bound the
  statement from before the Query), also when the cache answers the Query.

Needs HYPERPOOL_BINARY and HYPERPOOL_TEST_PG_ENV (ctest sets both).
"""
import asyncio
import os
import select
import socket
import struct
import time

import asyncpg
import psycopg

from pgtest_env import check, fail, metric, origin_url, run_serve_with_metrics, wait_for

N = 20


def released(murl):
    return metric(murl, "hyperpool_client_links_released_total")


def endpoint_sessions(murl):
    return metric(murl, "hyperpool_endpoint_sessions")


async def connect(url, **kw):
    kw.setdefault("statement_cache_size", 0)  # no named statements unless asked for
    return await asyncpg.connect(dsn=url, ssl=False, timeout=30, **kw)


async def expect_ended(conn, what):
    """`conn`'s next query fails: its session was ended (57P01 or a close)."""
    try:
        await conn.fetchval("SELECT 1")
        fail(f"{what}: still answers")
    except (asyncpg.exceptions.AdminShutdownError, asyncpg.exceptions.ConnectionDoesNotExistError,
            asyncpg.exceptions.InterfaceError, ConnectionError) as e:  # (InterfaceError: the FATAL came first)
        check(True, f"{what}: ended ({type(e).__name__})")


async def barrier(url, murl, before=None, expect=1):
    """Returns once an idle sweep has run after every session that went idle
    before this call: a new pristine session's release counts only after
    the sweep that visits it, and one timer serves them all in order. With
    `before` (the count read earlier), waits for `expect` releases since."""
    c = await connect(url)
    if before is None:
        before = released(murl)
    await c.execute("SELECT now()")
    await asyncio.to_thread(wait_for, lambda: released(murl) >= before + expect, f"{expect} release(s)", 20)
    return c


def bind_unnamed_after_query(dsn):
    """Parse('') and a run of it, a simple Query, then Bind('') + Execute + Sync (libpq through
    psycopg's pgconn): the SQLSTATE and message of the Bind's error, or None.
    The Query's answer is in the cache first (another session ran it), so
    that a local answer must destroy the statement too."""
    with psycopg.connect(dsn, autocommit=True) as warm:
        for _ in range(3):
            warm.pgconn.exec_(b"SELECT 2")
    with psycopg.connect(dsn, autocommit=True) as c:
        pg = c.pgconn
        r = pg.prepare(b"", b"SELECT 1")
        assert r.status == psycopg.pq.ExecStatus.COMMAND_OK, r.error_message
        r = pg.exec_prepared(b"", [])  # (Bind + Execute: the statement reached the origin)
        assert r.status == psycopg.pq.ExecStatus.TUPLES_OK, r.error_message
        pg.exec_(b"SELECT 2")
        r = pg.exec_prepared(b"", [])
        if r.status != psycopg.pq.ExecStatus.FATAL_ERROR:
            return None
        return (r.error_field(psycopg.pq.DiagnosticField.SQLSTATE).decode(),
                r.error_field(psycopg.pq.DiagnosticField.MESSAGE_PRIMARY).decode())


def unnamed_after_skipped_query(dsn):
    """Parse('') + Sync; then a failing Parse, a simple Query, Sync (the origin
    skips the Query, which so destroys nothing); then Bind('') + Execute +
    Sync. Raw protocol on a psycopg connection's socket: what each answered."""
    def msg(t, b):
        return t + struct.pack("!i", len(b) + 4) + b
    sync = msg(b"S", b"")
    with psycopg.connect(dsn, autocommit=True) as c:
        s = socket.socket(fileno=os.dup(c.pgconn.socket))
        s.settimeout(10)
        answers = []
        for data in (msg(b"P", b"\0select 7\0\0\0") + sync,
                     msg(b"P", b"bad\0selec\0\0\0") + msg(b"Q", b"select 8\0") + sync,
                     msg(b"B", b"\0\0" + b"\0" * 6) + msg(b"E", b"\0" + b"\0" * 4) + sync):
            s.sendall(data)
            buf, out = b"", []
            while not out or out[-1] != "Z":
                while len(buf) < 5 or len(buf) < 1 + struct.unpack("!i", buf[1:5])[0]:
                    buf += s.recv(65536)
                n = struct.unpack("!i", buf[1:5])[0]
                t, body, buf = buf[:1], buf[5:1 + n], buf[1 + n:]
                if t == b"E":
                    out.append("E:" + dict((f[:1], f[1:]) for f in body.split(b"\0") if f)[b"C"].decode())
                elif t == b"D":
                    out.append("D:" + body[6:].decode())
                elif t == b"Z":
                    out.append("Z")
            answers.append(" ".join(out))
        s.detach()
    return answers


async def main(url, murl):
    # A session shown its origin pid keeps its Endpoint half, which a later
    # pg_terminate_backend of that pid must find: directly that ends the
    # session, not some backend. (Released, the call would reach the origin
    # and end the pool's backend instead, or end another session.)
    pid_reader = await connect(url)
    shown = (await pid_reader.fetch("SELECT pg_backend_pid()"))[0][0]
    await pid_reader.execute("SELECT now()")  # (a simple Query: no unnamed statement left)
    control = await connect(url)
    await control.execute("SELECT now()")
    m = await barrier(url, murl, 0, 2)  # (after the sweeps that would have released pid_reader)
    caller = await connect(url)
    try:
        got = await caller.fetchval(f"SELECT pg_terminate_backend({shown}, 5000)")  # (the origin's form waits for the exit)
    except (asyncpg.exceptions.PostgresError, asyncpg.exceptions.InterfaceError, ConnectionError) as e:
        fail(f"pg_terminate_backend of a pid shown to another session ended the caller's own ({type(e).__name__})")
    check(got is True, f"pg_terminate_backend of the pid a session was shown answers t (got {got})")
    direct = await asyncpg.connect(dsn=origin_url(), ssl=False, timeout=30)
    alive = await direct.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", shown)
    await direct.close()
    check(alive == 1, f"the origin backend {shown} was not ended: the session was (alive {alive})")
    await expect_ended(pid_reader, "the session shown that pid")
    check(await control.fetchval("SELECT 8") == 8, "another session goes on")
    for c in (control, m, caller):
        await c.close()

    conns = [await connect(url) for _ in range(N)]
    await asyncio.gather(*(c.execute("SELECT now()") for c in conns))
    await asyncio.to_thread(wait_for, lambda: released(murl) >= N + 2 and endpoint_sessions(murl) == 0,
                            f"{N} idle sessions released", 20)
    check(True, f"{N} idle sessions let their link go (released {released(murl)}, "
                f"endpoint sessions {endpoint_sessions(murl)})")

    # The next query of each: a new link and Endpoint half, answered.
    got = await asyncio.gather(*(c.fetchval("SELECT $1::int * 2", i) for i, c in enumerate(conns)))
    check(got == [2 * i for i in range(N)], "every released session answers its next query")

    # Reads through the cache after a release see writes made since.
    await conns[0].execute("DROP TABLE IF EXISTS rl_t; CREATE TABLE rl_t (id int PRIMARY KEY, v text)")
    await conns[0].execute("INSERT INTO rl_t VALUES (1, 'before')")
    for _ in range(2):
        got = await conns[1].fetchval("SELECT v FROM rl_t WHERE id = 1")
    check(got == "before", f"a read before the write (got {got})")
    reader = await connect(url)
    before = released(murl)
    for _ in range(2):
        got = await reader.fetchval("SELECT v FROM rl_t WHERE id = 1")  # stored in both tiers
    await reader.execute("SELECT now()")  # (a simple Query: the unnamed statement is gone)
    m = await barrier(url, murl, before, 2)
    await conns[0].execute("UPDATE rl_t SET v = 'after' WHERE id = 1")
    got = await reader.fetchval("SELECT v FROM rl_t WHERE id = 1")
    check(got == "after", f"a released session reads the write made since, not a cached row (got {got})")
    await m.close()

    # Sessions whose Endpoint half holds something of theirs keep it.
    setter = await connect(url)
    await setter.execute("SET work_mem = '7MB'")
    named = await connect(url, statement_cache_size=100)  # asyncpg's named statements
    assert await named.fetchval("SELECT $1::int + 1", 1) == 2
    # (psycopg: its LISTEN's session sleeps; asyncpg's add_listener keeps it awake.)
    listener = psycopg.connect(url, autocommit=True)
    heard = []
    listener.add_notify_handler(heard.append)
    listener.execute("LISTEN rl_ch")
    temp = await connect(url)
    await temp.execute("CREATE TEMP TABLE rl_tmp AS SELECT 42 AS x")
    for c in (setter, named, temp):
        await c.execute("SELECT now()")  # go idle through a simple Query
    m = await barrier(url, murl)
    m2 = await barrier(url, murl)  # (two sweeps)
    got = await setter.fetchval("SHOW work_mem")
    check(got == "7MB", f"a session's SET survives the sweeps (got {got})")
    got = await named.fetchval("SELECT $1::int + 1", 2)
    check(got == 3, "a named prepared statement survives the sweeps")
    await conns[2].execute("NOTIFY rl_ch, 'hello'")
    deadline = time.monotonic() + 10
    while not heard and time.monotonic() < deadline:
        select.select([listener.fileno()], [], [], 0.2)
        listener.execute("SELECT 1")  # reads what arrived; the handler gets it
    check([n.payload for n in heard] == ["hello"], f"a LISTEN survives the sweeps (got {heard})")
    listener.close()
    got = await temp.fetchval("SELECT x FROM rl_tmp")
    check(got == 42, "a temporary table survives the sweeps")
    await m.close()
    await m2.close()

    # Signals aimed at released sessions (fresh ones: conns hold an unnamed
    # statement since their fetchval).
    idle_a = await connect(url)
    idle_b = await connect(url)
    await idle_a.execute("SELECT now()")
    await idle_b.execute("SELECT now()")
    m = await barrier(url, murl)
    caller = conns[3]
    got = await caller.fetchval(f"SELECT pg_cancel_backend({idle_a.get_server_pid()})")
    check(got is True, f"pg_cancel_backend of a released session answers t (got {got})")
    got = await idle_a.fetchval("SELECT 5")
    check(got == 5, "the cancelled released session goes on")
    got = await caller.fetchval(f"SELECT pg_terminate_backend({idle_b.get_server_pid()})")
    check(got is True, f"pg_terminate_backend of a released session answers t (got {got})")
    await expect_ended(idle_b, "the terminated released session")

    # A released session's next query is cancelled by its cancel key.
    sleeper = await connect(url)
    await sleeper.execute("SELECT now()")
    await m.close()
    m = await barrier(url, murl)
    t0 = time.monotonic()
    try:
        await sleeper.fetchval("SELECT pg_sleep(20)", timeout=1)  # asyncpg cancels at the timeout
        fail("pg_sleep(20) was not cancelled")
    except asyncio.TimeoutError:
        pass
    got = await sleeper.fetchval("SELECT 7")
    took = time.monotonic() - t0
    check(got == 7 and took < 10, f"a released session's next query is cancelled by its key ({took:.1f} s)")

    # A simple Query destroys the unnamed statement (which is why a session
    # that ran one after extended-protocol work may be let go): a Bind of it
    # without a Parse fails as directly, not with another statement bound.
    got = await asyncio.to_thread(bind_unnamed_after_query, url)
    want = await asyncio.to_thread(bind_unnamed_after_query, origin_url())
    check(got == want and want[0] == "26000",
          f"a Bind of the unnamed statement after a simple Query fails as directly (got {got}, directly {want})")

    for i, c in enumerate(conns):
        got = await c.fetchval("SELECT $1::int", i)
        if got != i:
            fail(f"client {i}: answers at the end")
    check(True, "every session answers at the end")

    # ...but a Query the origin skips (after an error, until Sync) destroys
    # nothing. Last: hyperpool keeps the origin connection lent after such
    # a skipped Query (docs/architecture.md, "Known differences, not fixed yet").
    want = await asyncio.to_thread(unnamed_after_skipped_query, origin_url())
    got = await asyncio.to_thread(unnamed_after_skipped_query, url)
    check(got == want and want[2] == "D:7 Z",
          f"the unnamed statement survives a skipped Query, as directly (got {got}, directly {want})")
    for c in conns + [reader, setter, named, temp, idle_a, sleeper, m]:
        await c.close()


run_serve_with_metrics(["--origin", origin_url(), "--pool-size", "2"], main)
